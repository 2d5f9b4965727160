package k8sobjectlinkprocessor

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/internal/redistest"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
)

// These tests start their own redis-server processes on free loopback ports (a Cluster of three
// masters; a master, a replica and three Sentinels) and kill them when they end. The shared
// server on 6379 is not used.

// pipelineCounter counts the pipelines carrying ID map records (keys under prefix) that one
// Redis node receives; connection set-up (HELLO, CLIENT SETNAME) also goes as a pipeline and is
// not a round trip of a batch.
type pipelineCounter struct {
	prefix string
	n      atomic.Int64
}

func (c *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (c *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (c *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if args := cmd.Args(); len(args) > 1 && strings.HasPrefix(fmt.Sprint(args[1]), c.prefix) {
				c.n.Add(1)
				break
			}
		}
		return next(ctx, cmds)
	}
}

// startRedisCluster runs three cluster-enabled masters and joins them, slots spread evenly.
func startRedisCluster(t *testing.T) []string {
	t.Helper()
	return redistest.Cluster(t)
}

func TestRedisClusterOneRoundTripPerNodePerBatchAndIdenticalTraceIDs(t *testing.T) {
	addrs := startRedisCluster(t)
	cfg := memoryConfig()
	cfg.IDMap.Backend = BackendRedis
	cfg.IDMap.Redis.Addresses = addrs
	cfg.IDMap.Redis.Mode = RedisModeCluster
	cfg.IDMap.Redis.KeyPrefix = uniquePrefix(t)
	base := model.WindowStart(time.Now(), model.DefaultWindow)
	clk := newFakeClock(time.Now())
	h1, h2 := newHarness(t, cfg, clk), newHarness(t, cfg, clk)

	// Count the pipelines each node receives from each processor.
	var mu sync.Mutex
	perNode := map[string]*pipelineCounter{}
	attach := func(c *redis.Client) {
		mu.Lock()
		defer mu.Unlock()
		pc := &pipelineCounter{prefix: cfg.IDMap.Redis.KeyPrefix}
		perNode[fmt.Sprintf("%p", c)] = pc
		c.AddHook(pc)
	}
	for _, h := range []*harness{h1, h2} {
		cc, ok := h.p.redis.Client().(*redis.ClusterClient)
		if !ok {
			t.Fatalf("mode cluster must build a ClusterClient, got %T", h.p.redis.Client())
		}
		cc.OnNewNode(attach)
		if err := cc.ForEachShard(context.Background(), func(_ context.Context, c *redis.Client) error {
			attach(c)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	snapshot := func() map[string]int64 {
		mu.Lock()
		defer mu.Unlock()
		m := make(map[string]int64, len(perNode))
		for k, pc := range perNode {
			m[k] = pc.n.Load()
		}
		return m
	}

	// The two processors share the stream, one batch each in turn, as behind a load balancer.
	stream := scenarioStream(base)
	nodesUsed := map[string]bool{}
	for i, b := range stream {
		h := []*harness{h1, h2}[i%2]
		before, trips := snapshot(), h.p.redis.RoundTrips()
		h.consume(b...)
		trips = h.p.redis.RoundTrips() - trips
		for node, n := range snapshot() {
			if d := n - before[node]; d > 0 {
				nodesUsed[node] = true
				if d > trips {
					t.Fatalf("batch %d: a node received %d pipelines for %d round trips of the processor; want at most one per node per round trip", i, d, trips)
				}
			}
		}
		if h.p.redis.Down() {
			t.Fatalf("batch %d: the cluster must not be taken for an outage", i)
		}
	}
	if len(nodesUsed) < 2 {
		t.Fatalf("the records of the stream went to %d node(s); they must spread over the slots of several", len(nodesUsed))
	}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		n, err := c.DBSize(context.Background()).Result()
		_ = c.Close()
		if err != nil || n == 0 {
			t.Fatalf("node %s holds %d keys (%v): records must spread over all three masters", a, n, err)
		}
	}
	split := append(h1.spans(), h2.spans()...)
	assertOneTree(t, split, stream)

	// The same stream through one processor with the memory backend: the same trace IDs.
	mem := newHarness(t, memoryConfig(), clk)
	for _, b := range stream {
		mem.consume(b...)
	}
	if rootTrace(t, split) != rootTrace(t, mem.spans()) {
		t.Fatal("two processors sharing a Redis Cluster must derive the trace a single processor derives")
	}
}

// startSentinel runs one Sentinel monitoring the master as "mymaster" with quorum 2.
func startSentinel(t *testing.T, masterPort int) string {
	t.Helper()
	port := freeLoopbackPort(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor mymaster 127.0.0.1 %d 2\n"+
		"sentinel down-after-milliseconds mymaster 2000\nsentinel failover-timeout mymaster 10000\n", port, dir, masterPort)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("redis-server", conf, "--sentinel")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting redis-server --sentinel: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	waitLong(t, func() bool {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
	return addr
}

func TestRedisSentinelFailoverMidStreamLosesNoSpanAndKeepsTraceIDs(t *testing.T) {
	master := startThrowawayRedis(t, 0)
	replica := startThrowawayRedis(t, 0, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	var sentinels []string
	for range 3 {
		sentinels = append(sentinels, startSentinel(t, master.Port))
	}
	roleInfo := func(addr string) string {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		info, _ := c.Info(context.Background(), "replication").Result()
		return info
	}
	waitLong(t, func() bool { return strings.Contains(roleInfo(replica.Addr()), "master_link_status:up") })
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinels[0]})
	defer sc.Close()
	// The Sentinel must know the replica before it can fail over to it.
	waitLong(t, func() bool {
		rs, err := sc.Replicas(context.Background(), "mymaster").Result()
		return err == nil && len(rs) == 1 && rs[0]["flags"] == "slave"
	})

	cfg := memoryConfig()
	cfg.IDMap.Backend = BackendRedis
	cfg.IDMap.Redis.Addresses = sentinels
	cfg.IDMap.Redis.Mode = RedisModeSentinel
	cfg.IDMap.Redis.SentinelMasterName = "mymaster"
	cfg.IDMap.Redis.KeyPrefix = uniquePrefix(t)
	cfg.IDMap.Redis.RetryMaxBackoff = 200 * time.Millisecond
	// A round trip slowed past the timeout by a loaded machine would also send a replica to its
	// memory: that is the outage tests' subject, not this one's.
	cfg.IDMap.Redis.Timeout = 5 * time.Second
	base := model.WindowStart(time.Now(), model.DefaultWindow)
	clk := newFakeClock(time.Now())
	h1, h2 := newHarness(t, cfg, clk), newHarness(t, cfg, clk)
	stream := scenarioStream(base)
	replicas := []*harness{h1, h2}
	const failoverAfter = 3
	for i, b := range stream[:failoverAfter] {
		replicas[i%2].consume(b...)
	}

	// Everything written so far has reached the replica, then the Sentinel promotes it.
	m := redis.NewClient(&redis.Options{Addr: master.Addr()})
	defer m.Close()
	waitLong(t, func() bool {
		n, err := m.Do(context.Background(), "WAIT", 1, 500).Int()
		return err == nil && n == 1
	})
	if err := sc.Failover(context.Background(), "mymaster").Err(); err != nil {
		t.Fatal(err)
	}
	waitLong(t, func() bool {
		addr, err := sc.GetMasterAddrByName(context.Background(), "mymaster").Result()
		return err == nil && addr[1] == strconv.Itoa(replica.Port)
	})
	waitLong(t, func() bool { return strings.Contains(roleInfo(replica.Addr()), "role:master") })
	// Each replica's client has seen the switch: a write through it lands on the new master. Else
	// one still on the demoted master works from memory while the other writes the same window
	// first, and an object's span goes out twice, an identical copy: the race documented under
	// "Redis restarted empty" (TestRedisRestartedEmptyMidStream), which a loaded machine made
	// this test meet now and then.
	promoted := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	defer promoted.Close()
	for i, h := range replicas {
		key := cfg.IDMap.Redis.KeyPrefix + "switched-" + strconv.Itoa(i)
		waitLong(t, func() bool {
			return h.p.redis.Client().Set(context.Background(), key, "1", time.Minute).Err() == nil &&
				promoted.Exists(context.Background(), key).Val() == 1
		})
	}

	for i, b := range stream[failoverAfter:] {
		replicas[(failoverAfter+i)%2].consume(b...)
	}
	// Both processors end up on the new master (after a READONLY answer or a dropped connection
	// they work from memory and reconcile when the probe reaches it).
	for _, h := range replicas {
		waitLong(t, h.p.redis.Reconciled)
	}
	split := append(h1.spans(), h2.spans()...)
	assertOneTree(t, split, stream)

	mem := newHarness(t, memoryConfig(), clk)
	for _, b := range stream {
		mem.consume(b...)
	}
	if rootTrace(t, split) != rootTrace(t, mem.spans()) {
		t.Fatal("a Sentinel failover must not change the trace IDs")
	}
	// The assignments written before the failover are on the promoted master.
	if promoted.Exists(context.Background(), cfg.IDMap.Redis.KeyPrefix+idmap.AssignmentKey(deploy.Key(), base)).Val() != 1 {
		t.Fatal("the Deployment's assignment must survive the failover on the new master")
	}
}

// waitLong is waitFor with room for a loaded machine: replica sync, Sentinel discovery and a
// failover take a few seconds on an idle one. Only a bound: the tests assert what happened.
func waitLong(t *testing.T, cond func() bool) {
	t.Helper()
	redistest.WaitFor(t, 30*time.Second, cond)
}

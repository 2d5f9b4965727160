package k8sconfig

import (
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/discovery"

	"github.com/kubetrail/kubetrail/internal/model"
)

// DiscoveryMapper answers resource↔kind questions for CRDs and aggregated APIs from the
// apiserver's discovery documents. A miss starts at most one refresh per minRefresh, so a stream
// of unknown resources cannot hammer the apiserver, and waits for it at most maxWait, so a slow or
// unreachable apiserver cannot stall the pipeline asking (client-go's discovery timeout is 32 s):
// after that the caller gets "unknown" now and the refreshed answer on a later call.
// Close waits for a refresh in flight; call it when the component shuts down.
type DiscoveryMapper struct {
	client     discovery.DiscoveryInterface
	minRefresh time.Duration
	maxWait    time.Duration
	now        func() time.Time

	mu          sync.RWMutex
	table       *model.TableMapper
	lastRefresh time.Time
	refreshing  chan struct{} // non-nil while a refresh runs; closed when it ends
	wg          sync.WaitGroup
}

// defaultMaxWait bounds how long a miss waits for discovery.
const defaultMaxWait = 2 * time.Second

// NewDiscoveryMapper returns a mapper backed by client.
func NewDiscoveryMapper(client discovery.DiscoveryInterface, minRefresh time.Duration) *DiscoveryMapper {
	return &DiscoveryMapper{client: client, minRefresh: minRefresh, maxWait: defaultMaxWait, now: time.Now, table: model.NewTableMapper(nil)}
}

// ByResource implements model.Mapper.
func (d *DiscoveryMapper) ByResource(group, resource string) (model.ResourceInfo, bool) {
	return d.lookup(func(t *model.TableMapper) (model.ResourceInfo, bool) { return t.ByResource(group, resource) })
}

// ByKind implements model.Mapper.
func (d *DiscoveryMapper) ByKind(group, kind string) (model.ResourceInfo, bool) {
	return d.lookup(func(t *model.TableMapper) (model.ResourceInfo, bool) { return t.ByKind(group, kind) })
}

// Prefetch starts a refresh in the background (at start, so the first CRD object is known).
func (d *DiscoveryMapper) Prefetch() { d.startRefresh() }

// Close waits for a refresh in flight.
func (d *DiscoveryMapper) Close() { d.wg.Wait() }

func (d *DiscoveryMapper) lookup(f func(*model.TableMapper) (model.ResourceInfo, bool)) (model.ResourceInfo, bool) {
	d.mu.RLock()
	info, ok := f(d.table)
	d.mu.RUnlock()
	if ok {
		return info, true
	}
	done := d.startRefresh()
	if done == nil {
		return model.ResourceInfo{}, false
	}
	timer := time.NewTimer(d.maxWait)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		return model.ResourceInfo{}, false
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	return f(d.table)
}

// startRefresh returns a channel closed when the running (or newly started) refresh ends, or nil
// when the last refresh is more recent than minRefresh.
func (d *DiscoveryMapper) startRefresh() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.refreshing != nil {
		return d.refreshing
	}
	if !d.lastRefresh.IsZero() && d.now().Sub(d.lastRefresh) < d.minRefresh {
		return nil
	}
	d.lastRefresh = d.now()
	done := make(chan struct{})
	d.refreshing = done
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		table := d.fetch()
		d.mu.Lock()
		if table != nil {
			d.table = table
		}
		d.refreshing = nil
		d.mu.Unlock()
		close(done)
	}()
	return done
}

// fetch reads the discovery documents; nil when nothing answered.
func (d *DiscoveryMapper) fetch() *model.TableMapper {
	// Partial results are normal (an aggregated API down): keep whatever groups answered.
	lists, _ := discovery.ServerPreferredResources(d.client)
	var infos []model.ResourceInfo
	for _, list := range lists {
		group, version := model.SplitAPIVersion(list.GroupVersion)
		for _, r := range list.APIResources {
			if r.Kind == "" || strings.Contains(r.Name, "/") {
				continue
			}
			infos = append(infos, model.ResourceInfo{Group: group, Version: version, Resource: r.Name, Kind: r.Kind, Namespaced: r.Namespaced})
		}
	}
	if len(infos) == 0 {
		return nil
	}
	return model.NewTableMapper(infos)
}

//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kubetrail/kubetrail/internal/model"
)

// Event-span checks: the k8s_event_spans receiver's spans as Jaeger returns them. The extra
// collectors of the restart and replica tests label their spans with their own cluster name, so
// that their output can be told apart from the main collector's, which serves as the reference:
// both watch the same apiserver, so both must emit the same occurrences with the same span IDs.

func requireEventsReceiver(t *testing.T, env *Env) {
	t.Helper()
	if !Check(t, "the collector has the k8s_event_spans receiver", env.Components.Has("receivers", "k8s_event_spans"),
		"bin/otelcol-kubetrail components lists receivers %v", env.Components["receivers"]) {
		t.FailNow()
	}
}

// ofCluster keeps the spans whose resource names the cluster.
func ofCluster(ss Spans, cluster string) Spans {
	return ss.Where(func(s *Span) bool { return s.Resource[model.AttrClusterName] == cluster })
}

// eventIDs is the sorted set of event span IDs.
func eventIDs(ss Spans) []string {
	set := map[string]bool{}
	for _, s := range ss.OfType(model.SpanTypeEvent) {
		set[s.SpanID] = true
	}
	out := make([]string, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// diffIDs returns the IDs in a but not in b.
func diffIDs(a, b []string) []string {
	in := map[string]bool{}
	for _, id := range b {
		in[id] = true
	}
	var out []string
	for _, id := range a {
		if !in[id] {
			out = append(out, id)
		}
	}
	return out
}

func describe(ss Spans, ids []string) string {
	byID := ss.ByID()
	var parts []string
	for i, id := range ids {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("… %d more", len(ids)-5))
			break
		}
		if s, ok := byID[id]; ok {
			parts = append(parts, s.Name+" on "+s.Object()+" #"+s.Attr(model.AttrEventCount))
		} else {
			parts = append(parts, id)
		}
	}
	return strings.Join(parts, ", ")
}

// eventsOnlyConfig is a collector running only k8s_event_spans (under its own cluster name) into
// Jaeger. max_event_age is short so that a fresh start does not re-emit the Events of earlier
// scenarios, whose windows other tests check.
func eventsOnlyConfig(env *Env, cluster string) Config {
	cfg := env.CollectorConfig()
	cfg.Delete("receivers.k8s_audit")
	cfg.Set("receivers.k8s_event_spans.cluster", cluster)
	cfg.Set("receivers.k8s_event_spans.max_event_age", "1s")
	cfg.SetPipeline("receivers", "k8s_event_spans")
	return cfg
}

// settleAgainstReference waits until the run's spans have settled and the event spans of
// cluster cover the main collector's (the processor holds spans up to owner_wait, so the two
// arrive at different times), and returns the main collector's spans and cluster's.
func settleAgainstReference(t *testing.T, env *Env, run *ScenarioRun, cluster string) (main, other Spans) {
	t.Helper()
	env.Spans(t, run)
	env.WaitSpans(t, run.Window(), 60*time.Second, func(all Spans) error {
		main, other = ofCluster(all, ClusterName), ofCluster(all, cluster)
		ref, got := eventIDs(main), eventIDs(other)
		if len(ref) == 0 {
			return fmt.Errorf("the main collector exported no event span in the run's window")
		}
		if missing := diffIDs(ref, got); len(missing) > 0 {
			return fmt.Errorf("%d of %d occurrences missing from cluster %s: %s", len(missing), len(ref), cluster, describe(main, missing))
		}
		if extra := diffIDs(got, ref); len(extra) > 0 {
			return fmt.Errorf("%d occurrences of cluster %s not (yet) exported by the main collector: %s", len(extra), cluster, describe(other, extra))
		}
		return nil
	})
	return main, other
}

func waitWatching(t *testing.T, c *Collector) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !c.LogContains("Watching Kubernetes Events") {
		if time.Now().After(deadline) {
			t.Fatalf("collector %s never started watching Events:\n%s", c.Name, c.LogTail(20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestDeploymentEventSpans(t *testing.T) {
	env := Testbed(t)
	requireEventsReceiver(t, env)
	run := env.Run(t, "deployment")
	spans := ofCluster(env.Spans(t, run), ClusterName)
	events := spans.OfType(model.SpanTypeEvent)
	byID := spans.ByID()

	for _, c := range []struct{ reason, kind, prefix string }{
		{"ScalingReplicaSet", "Deployment", "demo"},
		{"SuccessfulCreate", "ReplicaSet", "demo-"},
		{"Scheduled", "Pod", "demo-"},
	} {
		got := events.Named(c.reason).Where(func(s *Span) bool {
			return s.Attr(model.AttrObjectKind) == c.kind && s.Attr(model.AttrNamespaceName) == "default" &&
				strings.HasPrefix(s.Attr(model.AttrObjectName), c.prefix)
		})
		Check(t, c.reason+" Event spans on the "+c.kind, len(got) > 0,
			"event spans: %v", events.CountBy(func(s *Span) string { return s.Name + " on " + s.Attr(model.AttrObjectKind) }))
		// With k8s_object_link in the pipeline, each sits under its object's span.
		var misplaced []string
		for _, s := range got {
			p, ok := byID[s.ParentSpanID]
			if !ok || p.Type() != model.SpanTypeObject || p.Attr(model.AttrObjectUID) != s.Attr(model.AttrObjectUID) {
				misplaced = append(misplaced, s.Name+" on "+s.Object())
			}
		}
		if env.Components.Has("processors", "k8s_object_link") {
			Check(t, c.reason+" spans sit under their object's span", len(misplaced) == 0,
				"%d of %d without their object span as parent: %v", len(misplaced), len(got), misplaced)
		}
	}
	Check(t, "event span IDs are unique", len(events.DuplicateIDs()) == 0, "duplicated: %v", describe(events, events.DuplicateIDs()))
}

func TestUnschedulableEventSpans(t *testing.T) {
	env := Testbed(t)
	requireEventsReceiver(t, env)
	run := env.Run(t, "unschedulable")
	events := ofCluster(env.Spans(t, run), ClusterName).OfType(model.SpanTypeEvent).ForObject("Pod", "default", "pending")
	failed := events.Named("FailedScheduling")
	// Each FailedScheduling Event is a span at its first occurrence; the scheduler's retry makes
	// the Event a series, whose one series span follows once the series has been quiet for
	// series_quiet (15 minutes by default, beyond this test).
	Check(t, "each FailedScheduling Event is a span at its first occurrence", len(failed) >= 1 && len(failed.DuplicateIDs()) == 0,
		"FailedScheduling spans: %d, counts %v", len(failed), failed.Values(model.AttrEventCount))
	var notError []string
	for _, s := range failed {
		if s.StatusCode != "Error" {
			notError = append(notError, s.StatusCode)
		}
	}
	Check(t, "FailedScheduling spans have status Error", len(notError) == 0, "statuses %v", notError)
	Check(t, "the Pod is eventually Scheduled", len(events.Named("Scheduled")) == 1, "event spans: %v", events.Names())
}

// TestEventsRestartMidScenario restarts a collector with a file_storage checkpoint while the
// deployment scenario runs: over both runs it must emit exactly the occurrences the main
// collector emitted, each once.
func TestEventsRestartMidScenario(t *testing.T) {
	env := Testbed(t)
	requireEventsReceiver(t, env)
	if !Check(t, "the collector has the file_storage extension", env.Components.Has("extensions", "file_storage"),
		"extensions %v", env.Components["extensions"]) {
		t.FailNow()
	}
	const cluster = "e2e-events-restart"
	dir := filepath.Join(env.OutDir, "storage-"+cluster)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := eventsOnlyConfig(env, cluster)
	cfg.Delete("processors.k8s_object_link")
	cfg.SetPipeline("processors", "batch")
	cfg.Set("extensions.file_storage/events.directory", dir)
	cfg.Set("service.extensions", []any{"file_storage/events"})
	cfg.Set("receivers.k8s_event_spans.storage", "file_storage/events")
	c := env.StartExtraCollector(t, "events-restart", cfg)
	waitWatching(t, c)

	done := make(chan *ScenarioRun, 1)
	go func() {
		run, _ := env.RunScenario("deployment")
		done <- run
	}()
	// Down for a second in the middle of the rollout, so that Events happen while it is down.
	time.Sleep(500 * time.Millisecond)
	stopAt := time.Now()
	if err := c.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	time.Sleep(time.Second)
	startAt := time.Now()
	if err := c.start(); err != nil {
		t.Fatalf("start again: %v", err)
	}
	run := <-done
	if run.Err != nil {
		t.Fatalf("scenario: %v", run.Err)
	}
	Check(t, "the collector was down while the scenario ran", stopAt.After(run.Start) && stopAt.Before(run.End),
		"down %s – %s, scenario %s – %s", stopAt.Format(time.StampMilli), startAt.Format(time.StampMilli),
		run.Start.Format(time.StampMilli), run.End.Format(time.StampMilli))

	main, restarted := settleAgainstReference(t, env, run, cluster)
	whileDown := main.OfType(model.SpanTypeEvent).Between(stopAt, startAt)
	Check(t, "Events occurred while the collector was down", len(whileDown) > 0,
		"no event span of the main collector between %s and %s", stopAt.Format(time.StampMilli), startAt.Format(time.StampMilli))
	ev := restarted.OfType(model.SpanTypeEvent)
	missing, extra := diffIDs(eventIDs(main), eventIDs(restarted)), diffIDs(eventIDs(restarted), eventIDs(main))
	Check(t, "restart: zero lost occurrences", len(missing) == 0 && len(eventIDs(main)) > 0,
		"%d of %d missing: %s", len(missing), len(eventIDs(main)), describe(main, missing))
	Check(t, "restart: zero duplicated occurrences", len(ev.DuplicateIDs()) == 0,
		"%d duplicated: %s", len(ev.DuplicateIDs()), describe(ev, ev.DuplicateIDs()))
	Check(t, "restart: no occurrence the reference did not see", len(extra) == 0, "%d extra: %s", len(extra), describe(ev, extra))
	Check(t, "the restarted receiver resumed from its checkpoint", c.LogContains(`"checkpoint": true`), "log:\n%s", c.LogTail(30))
}

// TestEventsTwoActiveReplicas runs two collectors, both watching Events, both with
// k8s_object_link sharing the Redis ID map: downstream, each occurrence appears once.
func TestEventsTwoActiveReplicas(t *testing.T) {
	env := Testbed(t)
	requireEventsReceiver(t, env)
	if !Check(t, "the collector has the k8s_object_link processor", env.Components.Has("processors", "k8s_object_link"),
		"processors %v", env.Components["processors"]) {
		t.FailNow()
	}
	const cluster = "e2e-events-replicas"
	replica := func(name string) *Collector {
		cfg := eventsOnlyConfig(env, cluster)
		cfg.Set("processors.k8s_object_link.id_map.backend", "redis")
		cfg.Set("processors.k8s_object_link.id_map.redis.addresses", []any{"127.0.0.1:6379"})
		cfg.Set("processors.k8s_object_link.id_map.redis.key_prefix", "e2e-events-replicas:")
		return env.StartExtraCollector(t, name, cfg)
	}
	a, b := replica("events-replica-a"), replica("events-replica-b")
	waitWatching(t, a)
	waitWatching(t, b)

	run, err := env.RunScenario("deployment")
	if err != nil {
		t.Fatalf("scenario: %v", err)
	}
	main, replicas := settleAgainstReference(t, env, run, cluster)
	ev := replicas.OfType(model.SpanTypeEvent)
	Check(t, "two active replicas: every occurrence arrives", len(eventIDs(main)) > 0 && len(diffIDs(eventIDs(main), eventIDs(replicas))) == 0,
		"%d of %d missing", len(diffIDs(eventIDs(main), eventIDs(replicas))), len(eventIDs(main)))
	Check(t, "two active replicas: zero duplicate span IDs downstream", len(ev.DuplicateIDs()) == 0,
		"%d of %d event spans duplicated: %s", len(ev.DuplicateIDs()), len(ev), describe(ev, ev.DuplicateIDs()))
	Check(t, "both replicas watched", a.LogContains("Watching Kubernetes Events") && b.LogContains("Watching Kubernetes Events"), "")
}

package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
)

// summarize merges a recorded scenario's tree for kind/name and computes its summary.
func summarize(t *testing.T, scenario, kind, name string, f trail.Filter) (trail.Summary, *trail.Node) {
	t.Helper()
	td, err := golden.ReadTraces(filepath.Join(recorded, scenario+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	root, err := trail.Merge(trail.SpansFromTraces(td), trail.Target{Kind: kind, Namespace: "default", Name: name}, "", f)
	if err != nil {
		t.Fatal(err)
	}
	sum, ok := trail.Summarize(root)
	if !ok {
		t.Fatal("no summary")
	}
	return sum, root
}

// "Why is it slow" runs from the first user write until the tree is ready, as the spans' diffs
// tell it: the cleanup that follows (the user deleting the object, the garbage collector and the
// node agent removing the rest) is not slowness.
func TestWhyIsItSlowEndsWhenTheTreeIsReadyNotAtTheCleanup(t *testing.T) {
	tests := []struct {
		scenario, kind, name string
		// the write that made the tree ready
		actor, verb, object, why string
		total                    time.Duration
	}{
		// The last change (scale to 2, then a Pod deleted by hand and replaced): the Deployment
		// reports 2 of 2 ready 0.2 s before the user deletes it.
		{"deployment", "Deployment", "demo", "deployment-controller", "update status", "Deployment default/demo", "readyReplicas 2 of 2", 1510 * time.Millisecond},
		{"conflict", "Deployment", "contended", "deployment-controller", "update status", "Deployment default/contended", "readyReplicas 3 of 3", 825 * time.Millisecond},
		// A Job is ready when it completes; the CronJob has no readiness of its own.
		{"job", "CronJob", "nightly", "job-controller", "update status", "Job default/nightly-manual", "condition Complete True", 1088 * time.Millisecond},
		// The Pod waited a minute for a node; the node agent (kwok) made it Ready.
		{"unschedulable", "Pod", "pending", "kwok", "patch status", "Pod default/pending", "condition Ready True", 57149 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.scenario, func(t *testing.T) {
			sum, root := summarize(t, tc.scenario, tc.kind, tc.name, trail.Filter{Depth: -1})
			if !sum.Ready || sum.To.Span.Actor() != tc.actor || sum.To.Span.Verb() != tc.verb || sum.To.Node.Object.DisplayName() != tc.object || sum.Why != tc.why {
				t.Fatalf("ends at %s %s on %s (ready %v, %q); want ready after %s %s on %s (%s)", sum.To.Span.Actor(), sum.To.Span.Verb(),
					sum.To.Node.Object.DisplayName(), sum.Ready, sum.Why, tc.actor, tc.verb, tc.object, tc.why)
			}
			if sum.Total.Truncate(time.Millisecond) != tc.total {
				t.Errorf("total %s, want %s", sum.Total, tc.total)
			}
			// Before the root's deletion, and the waits too.
			_, deleted, _, _ := root.Lifetime()
			if deleted.IsZero() || !sum.To.Span.End.Before(deleted) {
				t.Errorf("the summary ends at %s, the root was deleted at %s", sum.To.Span.End, deleted)
			}
			for _, w := range sum.Waits {
				if w.Before.Span.Start.After(sum.To.Span.End) {
					t.Errorf("a wait after the tree was ready: until %s %s at %s", w.Before.Span.Actor(), w.Before.Span.Verb(), w.Before.Span.Start)
				}
			}
			if busy := sum.Busy + sum.UserPause; busy > sum.Total {
				t.Errorf("in flight %s + user pause %s exceed the total %s", sum.Busy, sum.UserPause, sum.Total)
			}
		})
	}
}

// When the spans do not tell readiness, the summary runs to the last activity and says so.
func TestWhyIsItSlowFallsBackToTheLastActivityAndSaysSo(t *testing.T) {
	t.Run("a kind without readiness (the CronJob alone)", func(t *testing.T) {
		sum, _ := summarize(t, "job", "CronJob", "nightly", trail.Filter{Depth: 0})
		if sum.Ready || sum.To.Span.Actor() != "kubernetes-admin" || sum.To.Span.Verb() != "delete" {
			t.Fatalf("ready %v, ends at %s %s", sum.Ready, sum.To.Span.Actor(), sum.To.Span.Verb())
		}
		if h := trail.SummaryHeadline(sum); !strings.Contains(h, "until the last activity at 10:49:47.797") || !strings.Contains(h, "readiness not told by the spans") {
			t.Fatalf("headline %q", h)
		}
	})
	t.Run("a Pod still unscheduled at the end of the range", func(t *testing.T) {
		sum, _ := summarize(t, "unschedulable", "Pod", "pending", trail.Filter{Depth: -1, Until: time.Date(2026, 11, 21, 10, 48, 30, 0, time.UTC)})
		if sum.Ready || sum.To.Span.Actor() != "kube-scheduler" {
			t.Fatalf("ready %v (%s), ends at %s %s", sum.Ready, sum.Why, sum.To.Span.Actor(), sum.To.Span.Verb())
		}
	})
	t.Run("the output says which end it took", func(t *testing.T) {
		src := "file=" + recordedFile(t, "unschedulable")
		_, out, _ := kubetrail(t, "trace", "pod/pending", "-n", "default", "--source", src)
		if !strings.Contains(out, "until ready at 10:49:00.411 (kwok patch status: Pod default/pending condition Ready True)") {
			t.Fatalf("tree:\n%s", head(out, 5))
		}
		_, out, _ = kubetrail(t, "trace", "pod/pending", "-n", "default", "--source", src, "--until", "2026-11-21T10:48:30Z", "-o", "timeline")
		if !strings.Contains(out, "until the last activity at 10:48:03.286 (kube-scheduler patch status: Pod default/pending; readiness not told by the spans)") {
			t.Fatalf("timeline:\n%s", head(out, 5))
		}
	})
}

// Who was waiting on whom, by role: the node agent that writes Pod status (kwok in the testbed,
// where kubelets would be) is not a user, so its turns are waits, not the user's think time.
func TestWaitsAreGroupedByRole(t *testing.T) {
	sum, _ := summarize(t, "unschedulable", "Pod", "pending", trail.Filter{Depth: -1})
	got := trail.WaitsLine(sum.ByRole)
	if !strings.HasPrefix(got, "scheduler 57.12s (2), node agent 7.5ms (1)") {
		t.Fatalf("by role: %s", got)
	}
	if sum.UserPause != 0 {
		t.Fatalf("user pause %s: the node agent's writes were taken for the user's", sum.UserPause)
	}
	sum, _ = summarize(t, "deployment", "Deployment", "demo", trail.Filter{Depth: -1})
	roles := map[string]bool{}
	for _, r := range sum.ByRole {
		roles[r.Actor] = true
	}
	if !roles["controllers"] || !roles["scheduler"] || !roles["node agent"] || roles["user"] || len(roles) != 3 {
		t.Fatalf("deployment by role: %s", trail.WaitsLine(sum.ByRole))
	}
}

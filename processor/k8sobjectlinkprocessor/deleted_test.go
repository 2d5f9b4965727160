package k8sobjectlinkprocessor

import (
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
)

// request makes a an audit span of the verb with the apiserver's answer code.
func request(a activity, verb string, code int64) activity {
	a.with = func(s ptrace.Span) {
		s.Attributes().PutStr(model.AttrAuditVerb, verb)
		s.Attributes().PutInt(model.AttrHTTPStatusCode, code)
	}
	return a
}

// A deleted object's relation and name index records live relation_ttl_after_delete after the
// delete, whatever refused request follows it; a delete the apiserver refused, or a later write
// of an object still there (finalizers, a graceful delete), keeps them relation_ttl.
func TestADeletedObjectsRecordsLiveRelationTTLAfterDelete(t *testing.T) {
	backends(t, func(t *testing.T, cfg func() *Config) {
		now := time.Now()
		c := cfg()
		h := newHarness(t, c, newFakeClock(now))
		h.consume(request(audit(podA1, "create-a", now), "create", 201), request(audit(podB1, "create-b", now), "create", 201))
		h.consume(
			request(audit(podA1, "delete-a", now.Add(time.Second)), "delete", 200),
			request(audit(podB1, "delete-b", now.Add(time.Second)), "delete", 403),
			// The kubelet's second delete of a Pod already gone: refused, it changes nothing.
			request(audit(withoutOwner(withoutUID(podA1)), "delete-a-again", now.Add(time.Second)), "delete", 404),
		)
		life := func(value string) time.Duration {
			t.Helper()
			for _, r := range h.records() {
				if r.value == value {
					return r.expire.Sub(now).Round(time.Minute)
				}
			}
			t.Fatalf("no record of value %q", value)
			return 0
		}
		check := func(what string, a, b time.Duration) {
			t.Helper()
			relA, nameA := life(idmap.EncodeOwner(podA1.Owner)), life(podA1.UID)
			relB, nameB := life(idmap.EncodeOwner(podB1.Owner)), life(podB1.UID)
			if relA != a || nameA != a || relB != b || nameB != b {
				t.Fatalf("%s: the deleted pod's relation and name live %s and %s, want %s; the other's %s and %s, want %s",
					what, relA, nameA, a, relB, nameB, b)
			}
		}
		check("after the deletes", c.RelationTTLAfterDelete, c.RelationTTL)

		// Still there (a finalizer): written again, it is kept relation_ttl again.
		h.consume(request(audit(podA1, "update-a", now.Add(2*time.Second)), "update", 200))
		check("after a later write", c.RelationTTL, c.RelationTTL)
	})
}

// With a cluster's churn (Pods created and deleted every minute under a ReplicaSet that stays),
// the memory ID map holds what the last windows and relation_ttl_after_delete need, not a day
// of deleted objects; the ReplicaSet's relation, idle all the while, still nests a new Pod.
func TestTheIDMapOfAChurningClusterLevelsOff(t *testing.T) {
	const afterDelete = 10 * time.Minute // relation_ttl_after_delete's default
	clk := newFakeClock(t0)
	h := newHarness(t, memoryConfig(), clk)
	h.consume(request(audit(rsA, "rs", t0), "create", 201))
	const perMinute, minutes = 20, 240
	pod := func(i int) model.Object {
		p := podA1
		p.Name, p.UID = fmt.Sprintf("demo-a-%05d", i), fmt.Sprintf("pod-%05d", i)
		return p
	}
	held, grafts := make([]int, 0, minutes), make([]int, 0, minutes)
	for m := range minutes {
		at := clk.Now()
		var acts []activity
		for j := range perMinute {
			i := m*perMinute + j
			acts = append(acts, request(audit(pod(i), fmt.Sprint("create-", i), at), "create", 201))
			if m > 0 {
				acts = append(acts, request(audit(pod(i-perMinute), fmt.Sprint("delete-", i-perMinute), at), "delete", 200))
			}
		}
		h.consume(acts...)
		records, _ := h.p.store.(*idmap.MemoryStore).Size()
		held = append(held, records)
		grafts = append(grafts, h.p.store.(*idmap.MemoryStore).Marks().Graft)
		clk.Advance(time.Minute)
	}
	// Per Pod: its window's assignment, at most two windows and grace, 65 minutes; its relation
	// and name, relation_ttl_after_delete once deleted; and what the sweep has yet to reach. Its
	// object span's graft mark (trace_context.nest) lives as long as the assignment, in a set of
	// its own, up to an eighth longer (a generation).
	maxHeld := perMinute * (65 + 2*int(afterDelete/time.Minute) + 25)
	maxGrafts := perMinute * (65 + 65/8 + 1)
	t.Logf("records held after 1 h %d, 2 h %d, 3 h %d, 4 h %d (%d Pods, at most %d expected); graft marks %d, %d, %d, %d (at most %d)",
		held[59], held[119], held[179], held[239], perMinute*minutes, maxHeld, grafts[59], grafts[119], grafts[179], grafts[239], maxGrafts)
	if held[239] > maxHeld || held[179] > maxHeld {
		t.Fatalf("%d records held after 4 h (%d after 3 h), want at most %d", held[239], held[179], maxHeld)
	}
	if grafts[239] > maxGrafts || grafts[179] > maxGrafts {
		t.Fatalf("%d graft marks held after 4 h (%d after 3 h), want at most %d", grafts[239], grafts[179], maxGrafts)
	}

	h.sink.Reset()
	h.consume(request(audit(podA1, "late", clk.Now()), "create", 201))
	assertChild(t, h.one("Deployment default/demo"), h.one("ReplicaSet default/demo-a"))
	assertChild(t, h.one("ReplicaSet default/demo-a"), h.one("Pod default/demo-a-1"))
}

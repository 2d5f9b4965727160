package trail

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/kubetrail/kubetrail/internal/model"
)

// attrObjectBody is the object's JSON on the snapshot event of a create or delete span
// (receiver/k8sauditreceiver).
const attrObjectBody = "k8s.object.body"

// counted are the replica counts readiness is read from, as paths of the object.
var counted = map[string]bool{
	"spec.replicas": true, "status.replicas": true, "status.readyReplicas": true, "status.updatedReplicas": true,
	"status.desiredNumberScheduled": true, "status.numberReady": true, "status.updatedNumberScheduled": true,
}

// objectState is what the spans tell of one object's readiness: its replica counts, conditions
// and phase, from the snapshot of its create and the diffs of the writes that followed.
type objectState struct {
	counts  map[string]int64  // path → value, absent when the object has no such field
	conds   map[string]string // condition type → status ("True", "False", "Unknown")
	phase   string            // status.phase
	deleted bool              // a delete of it succeeded: it is going away
}

func newObjectState() *objectState {
	return &objectState{counts: map[string]int64{}, conds: map[string]string{}}
}

// observe applies what s carries: a snapshot sets the state, a diff changes it.
func (st *objectState) observe(s *Span) {
	if s.Str(model.AttrAuditVerb) == "delete" && s.Str(model.AttrAuditSubresource) == "" {
		st.deleted = true
		return
	}
	for _, e := range s.Events {
		if e.Name != model.EventObjectSnapshot {
			continue
		}
		var obj map[string]any
		if body, _ := e.Attrs[attrObjectBody].(string); json.Unmarshal([]byte(body), &obj) == nil { // a cut body is not JSON
			for _, part := range []string{"spec", "status"} {
				m, _ := obj[part].(map[string]any)
				st.setPart(part, m)
			}
		}
	}
	changes, _ := s.Diff()
	for _, c := range changes {
		st.apply(c.Path, c.New)
	}
}

// setPart reads the counts, conditions and phase of a whole spec or status.
func (st *objectState) setPart(part string, m map[string]any) {
	for p := range counted {
		if f, ok := strings.CutPrefix(p, part+"."); ok {
			delete(st.counts, p)
			if n, ok := m[f].(float64); ok {
				st.counts[p] = int64(n)
			}
		}
	}
	if part == "status" {
		st.setConditions(m["conditions"])
		st.phase, _ = m["phase"].(string)
	}
}

func (st *objectState) setConditions(v any) {
	st.conds = map[string]string{}
	list, _ := v.([]any)
	for _, c := range list {
		if m, ok := c.(map[string]any); ok {
			typ, _ := m["type"].(string)
			status, _ := m["status"].(string)
			st.conds[typ] = status
		}
	}
}

// apply is one change of a diff: the path as the receiver writes it (status.readyReplicas,
// status.conditions[type=Ready].status) and the new JSON value, "" for removed.
func (st *objectState) apply(path, newValue string) {
	var v any
	if newValue != "" && json.Unmarshal([]byte(newValue), &v) != nil {
		return
	}
	switch {
	case counted[path]:
		delete(st.counts, path)
		if n, ok := v.(float64); ok {
			st.counts[path] = int64(n)
		}
	case path == "spec" || path == "status":
		m, _ := v.(map[string]any)
		st.setPart(path, m)
	case path == "status.conditions":
		st.setConditions(v)
	case path == "status.phase":
		st.phase, _ = v.(string)
	case strings.HasPrefix(path, "status.conditions[type="):
		typ, rest, ok := strings.Cut(strings.TrimPrefix(path, "status.conditions[type="), "]")
		if !ok {
			return
		}
		switch rest {
		case "": // the whole condition
			delete(st.conds, typ)
			if m, ok := v.(map[string]any); ok {
				st.conds[typ], _ = m["status"].(string)
			}
		case ".status":
			delete(st.conds, typ)
			if s, ok := v.(string); ok {
				st.conds[typ] = s
			}
		}
	}
}

// ready says whether the object of the given kind is ready, and why; known is false when the
// spans do not tell (a kind without a readiness rule, a Deployment whose spec.replicas was not
// seen). Ready is: a Pod's Ready condition True or its phase Succeeded or Failed (it will not
// get ready, nothing waits on it); a Job's Complete or Failed condition True; every replica of a
// Deployment, ReplicaSet, StatefulSet or ReplicationController ready and up to date
// (status.readyReplicas, status.replicas and, where reported, status.updatedReplicas equal to
// spec.replicas); a DaemonSet ready on every node it should run on; any other object's Ready
// condition True.
func (st *objectState) ready(kind string) (ready, known bool, why string) {
	switch kind {
	case "Pod":
		switch {
		case st.conds["Ready"] == "True":
			return true, true, "condition Ready True"
		case st.phase == "Succeeded" || st.phase == "Failed":
			return true, true, "phase " + st.phase
		}
		return false, true, ""
	case "Job":
		for _, c := range []string{"Complete", "Failed"} {
			if st.conds[c] == "True" {
				return true, true, "condition " + c + " True"
			}
		}
		return false, true, ""
	case "Deployment", "ReplicaSet", "StatefulSet", "ReplicationController":
		want, ok := st.counts["spec.replicas"]
		if !ok {
			return false, false, ""
		}
		ready, replicas := st.counts["status.readyReplicas"], st.counts["status.replicas"]
		updated, hasUpdated := st.counts["status.updatedReplicas"]
		if ready == want && replicas == want && (!hasUpdated || updated == want) {
			return true, true, fmt.Sprintf("readyReplicas %d of %d", ready, want)
		}
		return false, true, ""
	case "DaemonSet":
		want, ok := st.counts["status.desiredNumberScheduled"]
		if !ok {
			return false, false, ""
		}
		ready := st.counts["status.numberReady"]
		updated, hasUpdated := st.counts["status.updatedNumberScheduled"]
		if ready == want && (!hasUpdated || updated == want) {
			return true, true, fmt.Sprintf("numberReady %d of %d", ready, want)
		}
		return false, true, ""
	}
	if c, ok := st.conds["Ready"]; ok {
		return c == "True", true, "condition Ready " + c
	}
	return false, false, ""
}

// Readiness is the moment a tree became ready.
type Readiness struct {
	// At is the write after which every object of the tree that readiness can be told of was
	// ready (or gone).
	At Activity
	// Why is how that write left its object: "readyReplicas 2 of 2", "condition Ready True",
	// "deleted".
	Why string
}

// readiness finds, in acts (in time order), when the tree became ready: the last write after
// which every object whose readiness the spans tell was ready or being deleted, before the root
// object's deletion began. ok is false when the spans do not tell: no object's readiness is
// known, or the tree was not ready when its teardown began or the activity ended. Only writes
// in rng count as the moment; the ones before it build the objects' states (a generation's
// rollout starts from what the earlier ones left), the ones after it are not read.
func readiness(root *Node, acts []Activity, rng activityRange) (r Readiness, ok bool) {
	states := map[*Node]*objectState{}
	var order []*Node
	treeReady := func() bool {
		judged := 0
		for _, n := range order {
			st := states[n]
			if st.deleted {
				continue
			}
			ready, known, _ := st.ready(n.Object.Kind)
			if known && !ready {
				return false
			}
			if known {
				judged++
			}
		}
		return judged > 0
	}
	was := false
	for _, a := range acts {
		s := a.Span
		if !rng.to.IsZero() && !s.Start.Before(rng.to) {
			break
		}
		if s.Failed() || s.Type != model.SpanTypeAudit || !s.IsWrite() {
			continue
		}
		if a.Node == root && s.Str(model.AttrAuditVerb) == "delete" && s.Str(model.AttrAuditSubresource) == "" {
			break // teardown: what follows is the tree going away
		}
		st := states[a.Node]
		if st == nil {
			st = newObjectState()
			states[a.Node] = st
			order = append(order, a.Node)
		}
		st.observe(s)
		now := treeReady()
		if s.Start.Before(rng.from) {
			was = false // before the range: only the states count
			continue
		}
		if now && !was {
			_, _, why := st.ready(a.Node.Object.Kind)
			if why == "" {
				why = "deleted" // the write removed the last object that was not ready
			}
			r = Readiness{At: a, Why: why}
		}
		was = now
	}
	return r, was
}

// activityRange bounds the activity a summary is of: [from, to), zero for unbounded.
type activityRange struct{ from, to time.Time }

package trail

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"time"

	"github.com/kubetrail/kubetrail/internal/model"
)

// Attribute names of the snapshot and diff events this file reads (docs/span-model.md).
const (
	attrBody          = "k8s.object.body"
	attrBodyTruncated = "k8s.object.body.truncated"
	attrDiffTruncated = "k8s.object.diff.truncated"
	attrPathsCut      = "k8s.object.diff.paths_truncated"
	attrDiffBaseRV    = "k8s.object.diff.base_resource_version"
	attrDiffSkipped   = "k8s.object.diff.skipped"
	attrAuditNoop     = "k8s.audit.noop"
	attrResourceVer   = "k8s.object.resource_version"
	attrNewResVer     = "k8s.object.new_resource_version"
	attrGeneration    = "k8s.object.generation"
)

// Manifest is an object as it stood after one write, rebuilt from the bodies and diffs its spans
// carry.
type Manifest struct {
	// Object is the body: the last snapshot (a create's or a delete's) with every later diff
	// applied, metadata.resourceVersion and metadata.generation set from the write's span (a diff
	// leaves them out: they change on every write).
	Object map[string]any
	// ResourceVersion is the object's resourceVersion after that write.
	ResourceVersion string
	// After is the write whose result Object is: the last one at or before the time asked for
	// that changed the object.
	After *Span
	// Deleted is the last delete among the writes applied, if any: Object is then the body the
	// apiserver answered (a Pod in its grace period; the object as it was removed), with the
	// writes after it (a terminating Pod's status) applied.
	Deleted *Span
}

// ErrNotKnown is returned when the spans cannot tell the object's state at the time asked for:
// no body was audited (the policy's level), a write's diff was not computed or was cut. The
// error's text says which write and why, and when the state was last known.
var ErrNotKnown = errors.New("the object's state is not known")

// ManifestAt rebuilds the object of uid as it stood at `at`, from spans: the object's audit spans
// (other spans are ignored). It never guesses: a successful write whose change the spans do not
// hold (no diff: the audit level had no body, the diff base was not held, the diff was cut; or
// a diff that does not start from the state rebuilt so far) makes the state unknown until a
// snapshot or a diff based on the last known version makes it known again.
func ManifestAt(spans []*Span, uid string, at time.Time) (*Manifest, error) {
	writes := objectWrites(spans, uid)
	var r replayer
	var after *Span // the last write at or before at
	for _, w := range writes {
		if w.End.After(at) {
			break
		}
		after = w
		r.apply(w)
	}
	state, rv, known, why, lastAt, deleted := r.state, r.rv, r.known, r.why, r.lastAt, r.deleted
	switch {
	case after == nil && len(writes) > 0 && writes[0].Str(model.AttrAuditVerb) == "create" && !writes[0].Failed():
		return nil, fmt.Errorf("%w: it did not exist yet at %s: %s created it", ErrNotKnown, stamp(at), DescribeWrite(writes[0]))
	case after == nil:
		first := "none"
		if len(writes) > 0 {
			first = stamp(writes[0].End)
		}
		return nil, fmt.Errorf("%w: no write of the object at or before %s among the spans read (the first is at %s); widen --since to reach its create", ErrNotKnown, stamp(at), first)
	case state == nil:
		return nil, fmt.Errorf("%w: no write up to %s carried the object's body (a create or delete audited at RequestResponse level); the audit policy decides which writes carry bodies (distribution/audit-policy.yaml), or its create is before --since", ErrNotKnown, stamp(at))
	case !known:
		last := "never"
		if lastAt != nil {
			last = stamp(lastAt.End) + " (try --at " + lastAt.End.UTC().Format(time.RFC3339Nano) + ")"
		}
		return nil, fmt.Errorf("%w at %s: %s; its state was last known at %s", ErrNotKnown, stamp(at), why, last)
	}
	obj := deepCopy(state).(map[string]any)
	md, _ := obj["metadata"].(map[string]any)
	if md != nil {
		if rv != "" {
			md["resourceVersion"] = rv
		}
		if g, ok := intAttr(lastAt, attrGeneration); ok {
			md["generation"] = g
		}
	}
	return &Manifest{Object: obj, ResourceVersion: rv, After: lastAt, Deleted: deleted}, nil
}

// replayer rebuilds an object's state write by write (ManifestAt, States).
type replayer struct {
	state   map[string]any
	rv      string // the resourceVersion state is at
	known   bool
	why     string // why the state is not known
	lastAt  *Span  // the last write whose result is known
	deleted *Span
}

// apply takes one write, in the order the writes took effect, and reports whether it changed
// what is known of the object (its state, or that the state is not known).
func (r *replayer) apply(w *Span) bool {
	if w.Failed() || w.Str(attrAuditNoop) == "true" || unchanging[w.Str(model.AttrAuditSubresource)] {
		return false // nothing changed
	}
	newRV := w.Str(attrNewResVer)
	if body, ok, reason := snapshotOf(w); ok {
		r.state, r.known, r.rv, r.lastAt = body, true, newRV, w
		if r.rv == "" {
			r.rv = nestedString(body, "metadata", "resourceVersion")
		}
		if w.Str(model.AttrAuditVerb) == "delete" {
			r.deleted = w
		}
		return true
	} else if reason != "" {
		r.known, r.why = false, DescribeWrite(w)+": "+reason
		return true
	}
	if r.state == nil {
		return false // before any body: the first snapshot decides
	}
	d, ok := diffEvent(w)
	if !ok {
		reason := w.Str(attrDiffSkipped)
		switch {
		case reason != "":
			reason = "its diff was not computed (" + reason + ")"
		case w.Str(model.AttrAuditSubresource) == "binding":
			reason = "a binding answers with a Status, not the Pod: what it set (spec.nodeName, the PodScheduled condition) is in no body until the Pod's next write"
		default:
			reason = "it carries no diff (its audit record had no response body, or the write was to a subresource that answers with another kind)"
		}
		r.known, r.why = false, DescribeWrite(w)+": "+reason
		return true
	}
	base := asString(d.Attrs[attrDiffBaseRV])
	if base == "" || base == "null" {
		base = w.Str(attrResourceVer)
	}
	if base != "" && base != r.rv {
		if r.known {
			r.why = fmt.Sprintf("%s: its diff is based on resourceVersion %s, the state rebuilt so far is at %s", DescribeWrite(w), base, r.rv)
		}
		r.known = false
		return true
	}
	next, err := applyDiff(r.state, d)
	if err != nil {
		r.known, r.why = false, DescribeWrite(w)+": "+err.Error()
		return true
	}
	r.state, r.known, r.lastAt = next, true, w
	if newRV != "" {
		r.rv = newRV
	}
	return true
}

// State is what is known of an object from a time on: its body (nil when not known, Why says
// why) after the write answered at At.
type State struct {
	At     time.Time
	Object map[string]any
	Why    string
}

// States are the object's successive states, one per write that changed what is known of it,
// from its first body on: the timeline's state bands.
func States(spans []*Span, uid string) []State {
	var r replayer
	var out []State
	for _, w := range objectWrites(spans, uid) {
		if !r.apply(w) || r.state == nil {
			continue
		}
		st := State{At: w.End}
		if r.known {
			st.Object = r.state // replaced, never changed in place, by later writes
		} else {
			st.Why = r.why
		}
		out = append(out, st)
	}
	return out
}

// unchanging are the subresources whose writes leave their object as it was: a token request
// creates a token for a ServiceAccount, not a change of it.
var unchanging = map[string]bool{"token": true}

// objectWrites are the object's audit spans of write verbs, in the order they took effect: by
// the resourceVersion they produced when every write that produced one names a number (an
// etcd revision, as kube-apiserver's are), else by the time they were answered.
func objectWrites(spans []*Span, uid string) []*Span {
	seen := map[spanKey]bool{}
	var out []*Span
	for _, s := range spans {
		if !s.IsWrite() || s.Object.UID != uid || seen[keyOf(s)] {
			continue
		}
		seen[keyOf(s)] = true
		out = append(out, s)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].End.Before(out[j].End) })
	// Two writes of one object can be answered out of the order they committed in; the
	// resourceVersions tell the order when they are numbers.
	type rvAt struct {
		rv uint64
		i  int
	}
	var committed []rvAt
	for i, s := range out {
		if s.Failed() || s.Str(attrAuditNoop) == "true" {
			continue
		}
		n, err := strconv.ParseUint(s.Str(attrNewResVer), 10, 64)
		if err != nil {
			return out // not numbers: the answer times it is
		}
		committed = append(committed, rvAt{n, i})
	}
	pos := make([]int, len(committed))
	for k, c := range committed {
		pos[k] = c.i
	}
	sort.SliceStable(committed, func(a, b int) bool { return committed[a].rv < committed[b].rv })
	reordered := make([]*Span, len(out))
	copy(reordered, out)
	for k, c := range committed {
		reordered[pos[k]] = out[c.i]
	}
	return reordered
}

// snapshotOf returns the body of a write's snapshot event; reason says why a snapshot that is
// there cannot be used (cut at the receiver's bound, not JSON).
func snapshotOf(s *Span) (body map[string]any, ok bool, reason string) {
	for _, e := range s.Events {
		if e.Name != model.EventObjectSnapshot {
			continue
		}
		if t, _ := e.Attrs[attrBodyTruncated].(bool); t {
			return nil, false, "its body was cut at the receiver's 64 KiB bound"
		}
		text, _ := e.Attrs[attrBody].(string)
		var m map[string]any
		if err := json.Unmarshal([]byte(text), &m); err != nil || m == nil {
			return nil, false, "its body is not a JSON object"
		}
		return m, true, ""
	}
	return nil, false, ""
}

func diffEvent(s *Span) (Event, bool) {
	for _, e := range s.Events {
		if e.Name == model.EventObjectDiff && !IsAttempted(e) {
			return e, true
		}
	}
	return Event{}, false
}

// applyDiff returns state with the diff event's changes applied, each checked against its old
// value: a change that does not start from what state holds means the state rebuilt so far is
// not the one the receiver diffed against.
func applyDiff(state map[string]any, e Event) (map[string]any, error) {
	if t, _ := e.Attrs[attrDiffTruncated].(bool); t {
		return nil, errors.New("its diff was cut at the receiver's bound of 128 paths")
	}
	if t, _ := e.Attrs[attrPathsCut].(bool); t {
		return nil, errors.New("a path of its diff was cut at the receiver's bound")
	}
	paths, _ := e.Attrs[attrDiffPaths].([]any)
	olds, _ := e.Attrs[attrDiffOld].([]any)
	news, _ := e.Attrs[attrDiffNew].([]any)
	if len(olds) != len(paths) || len(news) != len(paths) {
		return nil, errors.New("its diff's paths, old and new values do not pair up")
	}
	next := deepCopy(state).(map[string]any)
	var root any = next
	for i := range paths {
		p, err := ParseFieldPath(asString(paths[i]))
		if err != nil {
			return nil, fmt.Errorf("its diff path %q: %v", asString(paths[i]), err)
		}
		oldV, oldAbsent, err := jsonValue(asString(olds[i]))
		if err != nil {
			return nil, fmt.Errorf("the old value of %s was cut at the receiver's 512-byte bound", p)
		}
		newV, newAbsent, err := jsonValue(asString(news[i]))
		if err != nil {
			return nil, fmt.Errorf("the new value of %s was cut at the receiver's 512-byte bound", p)
		}
		cur, found := lookup(root, p)
		if found == oldAbsent || (found && !reflect.DeepEqual(cur, oldV)) {
			return nil, fmt.Errorf("its change of %s does not start from the state rebuilt so far", p)
		}
		if root, err = set(root, p, newV, newAbsent); err != nil {
			return nil, fmt.Errorf("its change of %s: %v", p, err)
		}
	}
	out, _ := compact(root).(map[string]any)
	return out, nil
}

// jsonValue reads a diff value: a JSON text, or "" for a side that is absent.
func jsonValue(text string) (v any, absent bool, err error) {
	if text == "" {
		return nil, true, nil
	}
	err = json.Unmarshal([]byte(text), &v)
	return v, false, err
}

// removed marks a list element a diff took away; compact drops it once the whole diff is
// applied, so the later paths of the same diff still find their elements by index.
type removedElement struct{ _ byte }

var removed any = &removedElement{}

func lookup(v any, p FieldPath) (any, bool) {
	for _, s := range p {
		switch {
		case s.IsIndex:
			l, ok := v.([]any)
			if !ok || s.Index >= len(l) || l[s.Index] == removed {
				return nil, false
			}
			v = l[s.Index]
		case s.isMatch():
			l, ok := v.([]any)
			if !ok {
				return nil, false
			}
			i := matchIndex(l, s)
			if i < 0 {
				return nil, false
			}
			v = l[i]
		default:
			m, ok := v.(map[string]any)
			if !ok {
				return nil, false
			}
			if v, ok = m[s.Key]; !ok {
				return nil, false
			}
		}
	}
	return v, true
}

// set returns v with the value at p set to nv, or removed when absent; the containers on the
// way are made as the path's steps say.
func set(v any, p FieldPath, nv any, absent bool) (any, error) {
	if len(p) == 0 {
		if absent {
			return removed, nil
		}
		return nv, nil
	}
	s := p[0]
	switch {
	case s.IsIndex:
		l, ok := v.([]any)
		if v == nil {
			ok = true
		}
		if !ok {
			return nil, fmt.Errorf("[%d] of a value that is not a list", s.Index)
		}
		switch {
		case s.Index < len(l):
			c, err := set(l[s.Index], p[1:], nv, absent)
			if err != nil {
				return nil, err
			}
			l[s.Index] = c
		case s.Index == len(l) && !absent:
			c, err := set(nil, p[1:], nv, absent)
			if err != nil {
				return nil, err
			}
			l = append(l, c)
		case absent:
			// Already absent.
		default:
			return nil, fmt.Errorf("[%d] past the end of a list of %d", s.Index, len(l))
		}
		return l, nil
	case s.isMatch():
		l, ok := v.([]any)
		if v == nil {
			ok = true
		}
		if !ok {
			return nil, fmt.Errorf("[%s=%s] of a value that is not a list", s.Field, s.Value)
		}
		if i := matchIndex(l, s); i >= 0 {
			c, err := set(l[i], p[1:], nv, absent)
			if err != nil {
				return nil, err
			}
			l[i] = c
			return l, nil
		}
		if absent {
			return l, nil
		}
		c, err := set(nil, p[1:], nv, absent)
		if err != nil {
			return nil, err
		}
		return append(l, c), nil
	default:
		m, ok := v.(map[string]any)
		if v == nil {
			m, ok = map[string]any{}, true
		}
		if !ok {
			return nil, fmt.Errorf("key %q of a value that is not an object", s.Key)
		}
		c, err := set(m[s.Key], p[1:], nv, absent)
		if err != nil {
			return nil, err
		}
		if c == removed {
			delete(m, s.Key)
		} else {
			m[s.Key] = c
		}
		return m, nil
	}
}

// matchIndex is the index of the element of l whose s.Field is s.Value, -1 when none is.
func matchIndex(l []any, s Segment) int {
	for i, e := range l {
		m, ok := e.(map[string]any)
		if !ok {
			continue
		}
		if v, ok := m[s.Field]; ok && asString(v) == s.Value {
			return i
		}
	}
	return -1
}

// compact drops the list elements a diff removed.
func compact(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, c := range v {
			v[k] = compact(c)
		}
		return v
	case []any:
		out := v[:0]
		for _, c := range v {
			if c != removed {
				out = append(out, compact(c))
			}
		}
		return out
	}
	return v
}

func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, c := range v {
			m[k] = deepCopy(c)
		}
		return m
	case []any:
		l := make([]any, len(v))
		for i, c := range v {
			l[i] = deepCopy(c)
		}
		return l
	}
	return v
}

func nestedString(m map[string]any, keys ...string) string {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = mm[k]
	}
	s, _ := v.(string)
	return s
}

// DescribeWrite names a write in a message: "kubernetes-admin patch scale at 10:45:54.716" (UTC).
func DescribeWrite(s *Span) string {
	return fmt.Sprintf("%s %s at %s", s.Actor(), s.Verb(), clock(s.Start))
}

// ObjectWrites are the writes of the object of uid answered after from until to, in the order
// they took effect: what `kubetrail show --diff` prints.
func ObjectWrites(spans []*Span, uid string, from, to time.Time) []Write {
	var out []Write
	for _, s := range objectWrites(spans, uid) {
		if s.End.After(from) && !s.End.After(to) {
			out = append(out, WriteOf(s))
		}
	}
	return out
}

// stamp is a time in messages: UTC, to the millisecond.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000 UTC") }

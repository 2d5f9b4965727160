package auditconv

import (
	"net/http"
	"slices"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/model"
)

// Attributes of this receiver's span events and links; the object and audit attributes shared
// with the other components live in internal/model.
const (
	attrDiffPaths     = "k8s.object.diff.paths"
	attrDiffOld       = "k8s.object.diff.old"
	attrDiffNew       = "k8s.object.diff.new"
	attrDiffCount     = "k8s.object.diff.count"
	attrDiffTruncated = "k8s.object.diff.truncated"
	// attrDiffPathsTruncated says that at least one path was cut (a path through a long key).
	attrDiffPathsTruncated = "k8s.object.diff.paths_truncated"
	// attrDiffBase, on a diff event, is the resourceVersion of the cached body the diff was
	// computed from, when the request did not name its base (a patch without precondition): the
	// diff then holds the changes of any write between that version and this one not seen here.
	attrDiffBase = "k8s.object.diff.base_resource_version"
	// attrDiffSkipped, on an update or patch span whose response carried the object, says why
	// it has no diff: diffSkipped* values.
	attrDiffSkipped   = "k8s.object.diff.skipped"
	attrObjectBody    = "k8s.object.body"
	attrBodyTruncated = "k8s.object.body.truncated"
	attrErrorCode     = "k8s.audit.error.code"
	attrErrorReason   = "k8s.audit.error.reason"
	attrErrorMessage  = "k8s.audit.error.message"
	attrErrorCauses   = "k8s.audit.error.causes"
	attrClamped       = "k8s.audit.stage_timestamp.clamped"
	// attrAuditNoop marks a successful write that changed nothing: the apiserver answered a new
	// request (a new auditID) with the resourceVersion the object already had.
	attrAuditNoop   = "k8s.audit.noop"
	eventAuditPatch = "k8s.audit.patch"
)

// fillObject completes an identity from a body's metadata, never overriding what objectRef
// already said.
func fillObject(o *model.Object, m objectMeta) {
	if o.Name == "" {
		o.Name = m.Name
	}
	if o.Namespace == "" {
		o.Namespace = m.Namespace
	}
	if o.UID == "" {
		o.UID = m.UID
	}
	o.Kind = m.Kind
	if o.Version == "" {
		_, o.Version = model.SplitAPIVersion(m.APIVersion)
	}
	if m.Owner.UID != "" || m.Owner.Name != "" {
		o.Owner = model.Owner{APIVersion: m.Owner.APIVersion, Kind: m.Owner.Kind, Name: m.Owner.Name, UID: m.Owner.UID}
	}
}

// spanName is "<verb> <resource>[/<subresource>]" (docs/span-model.md, Span names): what was
// done to which kind of object, a small fixed set per resource. Who did it, to which object,
// and how it ended are attributes and the status, never the name: OpenTelemetry asks for names
// of low cardinality, and backends keep one operation per name.
// The verb is one filterReason keeps, the resource a valid one (validResource) and the
// subresource bounded.
func spanName(verb, resource, subresource string) string {
	n := len(verb) + 1 + len(resource)
	if subresource != "" {
		n += 1 + len(subresource)
	}
	b := make([]byte, 0, n)
	b = append(b, verb...)
	b = append(b, ' ')
	b = append(b, resource...)
	if subresource != "" {
		b = append(b, '/')
		b = append(b, subresource...)
	}
	return validText(string(b))
}

func statusText(ev *Event, code int) string {
	if ev.ResponseStatus != nil && ev.ResponseStatus.Reason != "" {
		return ev.ResponseStatus.Reason
	}
	if ev.Stage == stagePanic {
		return "Panic"
	}
	if t := http.StatusText(code); t != "" {
		return t
	}
	return "Error"
}

// setError sets the span's error status and event. Messages and causes go through scrub: a
// validation error or an admission webhook's denial may quote a value that redaction masks.
// Reason, message and causes are cut at their bounds (cut) after scrubbing: a value to scrub
// may sit across the cut.
func setError(span ptrace.Span, ev *Event, code int, ts pcommon.Timestamp, scrub func(string) string, cut *cuts) {
	reason := cut.text(attrErrorReason, scrub(validText(statusText(ev, code))), maxReasonBytes)
	msg := reason
	var st status
	if ev.ResponseStatus != nil {
		st = *ev.ResponseStatus
	}
	st.Message = cut.text(attrErrorMessage, scrub(validText(st.Message)), maxMessageBytes)
	if st.Message != "" {
		msg = reason + ": " + st.Message
	}
	span.Status().SetCode(ptrace.StatusCodeError)
	span.Status().SetMessage(msg)

	e := span.Events().AppendEmpty()
	e.SetName(model.EventAuditError)
	e.SetTimestamp(ts)
	a := e.Attributes()
	if code != 0 {
		a.PutInt(attrErrorCode, int64(code))
	}
	a.PutStr(attrErrorReason, reason)
	putNonEmpty(a, attrErrorMessage, st.Message)
	if st.Details != nil && len(st.Details.Causes) > 0 {
		list := st.Details.Causes
		if len(list) > maxCauses {
			list = list[:maxCauses]
			cut.note(attrErrorCauses)
		}
		causes := a.PutEmptySlice(attrErrorCauses)
		causes.EnsureCapacity(len(list))
		for _, c := range list {
			s := c.Message
			if c.Field != "" {
				s = c.Field + ": " + s
			}
			if c.Type != "" {
				s += " (" + c.Type + ")"
			}
			causes.AppendEmpty().SetStr(cut.text(attrErrorCauses, scrub(validText(s)), maxMessageBytes))
		}
	}
}

// putPatch adds a patch request's body, as redactor.patchText exports it.
func putPatch(span ptrace.Span, text string, ts pcommon.Timestamp) {
	e := span.Events().AppendEmpty()
	e.SetName(eventAuditPatch)
	e.SetTimestamp(ts)
	text, cut := clipBody(validText(text))
	e.Attributes().PutStr(model.AttrAuditPatch, text)
	if cut {
		e.Attributes().PutBool(attrBodyTruncated, true)
	}
}

func putSnapshot(span ptrace.Span, body string, ts pcommon.Timestamp) {
	body = untag(body)
	e := span.Events().AppendEmpty()
	e.SetName(model.EventObjectSnapshot)
	e.SetTimestamp(ts)
	body, cut := clipBody(validText(body))
	e.Attributes().PutStr(attrObjectBody, body)
	if cut {
		e.Attributes().PutBool(attrBodyTruncated, true)
	}
}

// putDiff encodes a diff as three parallel string arrays (paths, old values, new values; JSON
// texts, "" where a side is absent) plus the count, and the resourceVersion it is relative to
// when the request did not name it. Parallel arrays keep one attribute per role instead of one
// per path, so backends index three keys however many paths change.
func putDiff(span ptrace.Span, d diffResult, ts pcommon.Timestamp) {
	if d.Total == 0 {
		return
	}
	changes, pathsCut := d.exported(true) // any body may hold tagged values
	e := span.Events().AppendEmpty()
	e.SetName(model.EventObjectDiff)
	e.SetTimestamp(ts)
	a := e.Attributes()
	paths := a.PutEmptySlice(attrDiffPaths)
	olds := a.PutEmptySlice(attrDiffOld)
	news := a.PutEmptySlice(attrDiffNew)
	paths.EnsureCapacity(len(changes))
	olds.EnsureCapacity(len(changes))
	news.EnsureCapacity(len(changes))
	for _, c := range changes {
		paths.AppendEmpty().SetStr(c.Path)
		olds.AppendEmpty().SetStr(c.Old)
		news.AppendEmpty().SetStr(c.New)
	}
	a.PutInt(attrDiffCount, int64(d.Total))
	if d.Total > len(changes) {
		a.PutBool(attrDiffTruncated, true)
	}
	if pathsCut {
		a.PutBool(attrDiffPathsTruncated, true)
	}
	putNonEmpty(a, attrDiffBase, d.Base)
}

func clipBody(s string) (string, bool) {
	if len(s) <= maxBodyBytes {
		return s, false
	}
	cut := maxBodyBytes
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut], true
}

// impliedGroups reports whether groups are exactly those the apiserver gives the user name by
// itself, so that k8s.audit.user.groups would say nothing user.name does not: a service
// account's system:serviceaccounts, system:serviceaccounts:<namespace> and
// system:authenticated; a node's system:nodes and system:authenticated; any other system:
// user's system:authenticated. A person's groups, or a component's extra ones, are never
// implied.
func impliedGroups(user string, groups []string) bool {
	const saGroup = "system:serviceaccounts"
	var want [3]string // the last one, a service account's namespace group, is matched in parts
	n, ns := 0, ""
	switch {
	case strings.HasPrefix(user, "system:serviceaccount:"):
		var ok bool
		if ns, _, ok = strings.Cut(user[len("system:serviceaccount:"):], ":"); !ok {
			return false
		}
		want, n = [3]string{saGroup, "system:authenticated"}, 2
	case strings.HasPrefix(user, "system:node:"):
		want, n = [3]string{"system:nodes", "system:authenticated"}, 2
	case strings.HasPrefix(user, "system:"):
		want, n = [3]string{"system:authenticated"}, 1
	default:
		return false
	}
	if ns != "" {
		// system:serviceaccounts:<namespace>, compared in parts: no string built per span.
		if len(groups) != n+1 || !slices.ContainsFunc(groups, func(g string) bool {
			rest, ok := strings.CutPrefix(g, saGroup+":")
			return ok && rest == ns
		}) {
			return false
		}
	} else if len(groups) != n {
		return false
	}
	for _, w := range want[:n] { // distinct names, as many as the groups: the same set
		if !slices.Contains(groups, w) {
			return false
		}
	}
	return true
}

// bound cuts the revision and the hashes at their bound.
func (r *rollout) bound(cut *cuts) {
	r.Revision = cut.text(model.AttrObjectRevision, r.Revision, maxShortBytes)
	r.TemplateHash = cut.text(model.AttrObjectTemplateHash, r.TemplateHash, maxShortBytes)
	r.RevisionHash = cut.text(model.AttrObjectRevisionHash, r.RevisionHash, maxShortBytes)
}

// put writes what the body said of the rollout onto the span (docs/span-model.md, Rollouts).
func (r *rollout) put(attrs pcommon.Map) {
	if r.Generation > 0 {
		attrs.PutInt(model.AttrObjectGeneration, r.Generation)
	}
	if r.ObservedGeneration > 0 {
		attrs.PutInt(model.AttrObjectObservedGeneration, r.ObservedGeneration)
	}
	putNonEmpty(attrs, model.AttrObjectRevision, r.Revision)
	putNonEmpty(attrs, model.AttrObjectTemplateHash, r.TemplateHash)
	putNonEmpty(attrs, model.AttrObjectRevisionHash, r.RevisionHash)
}

func putNonEmpty(m pcommon.Map, key, value string) {
	if value != "" {
		m.PutStr(key, value)
	}
}

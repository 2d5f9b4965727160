package auditconv

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/model"
)

// huge is longer than every bound: 64 KiB of one character, with a multi-byte character at
// every bound's edge so that a cut that splits one shows as invalid UTF-8.
func huge(c string) string { return strings.Repeat(c+"é", 64<<10/3) }

// hostileEvent is a failed update whose every string the apiserver copies from the client, or
// that a forged event can hold, is 64 KiB long.
func hostileEvent(id string) Event {
	ref := objectReference{Resource: "deployments", APIGroup: "apps", APIVersion: huge("v"), Namespace: huge("n"), Name: huge("d"), UID: huge("u"),
		ResourceVersion: huge("1"), Subresource: huge("s")}
	causes := make([]statusCause, 100)
	for i := range causes {
		causes[i] = statusCause{Type: "FieldValueInvalid", Message: huge("m"), Field: "spec.x"}
	}
	groups := make([]string, 100)
	for i := range groups {
		groups[i] = huge(fmt.Sprint(i % 10))
	}
	anns := []annotation{
		{Key: annAuthzDecision, Value: huge("f")},
		{Key: annAuthzReason, Value: huge("r")},
		{Key: annPolicyFailure, Value: huge("p")},
		{Key: annPodSecurityPrefix + huge("k"), Value: "x"},
	}
	for i := range 100 {
		anns = append(anns,
			annotation{Key: fmt.Sprintf("%sround_0_index_%d", annMutationPrefix, i), Value: `{"configuration":"c","webhook":"` + huge("w") + `","mutated":true}`},
			annotation{Key: fmt.Sprintf("%sk%d", annPodSecurityPrefix, i), Value: huge("v")},
			annotation{Key: fmt.Sprintf("%sstage%d", annLatencyPrefix, i), Value: "1s"})
	}
	return event(id, "update", huge("alice"), ref, 422, func(ev *Event) {
		ev.Level = huge("L")
		ev.User.Groups = groups
		ev.ImpersonatedUser = &userInfo{Username: huge("bob")}
		ev.UserAgent = huge("kubectl/")
		ev.SourceIPs = []string{huge("1")}
		ev.RequestURI = "/apis/apps/v1/" + huge("p") + "?dryRun="
		ev.ResponseStatus = &status{Code: 422, Reason: huge("Invalid"), Message: huge("invalid"), Details: &statusDetails{Causes: causes}}
		ev.Annotations = anns
	})
}

// walkStrings calls fn with every string value of the span's attributes, its Resource's, its
// events' and its links', and the key it is under.
func walkStrings(rs ptrace.ResourceSpans, fn func(key, v string)) {
	var walk func(key string, v pcommon.Value)
	walk = func(key string, v pcommon.Value) {
		switch v.Type() {
		case pcommon.ValueTypeStr:
			fn(key, v.Str())
		case pcommon.ValueTypeSlice:
			for _, x := range v.Slice().All() {
				walk(key, x)
			}
		}
	}
	maps := []pcommon.Map{rs.Resource().Attributes()}
	for _, ss := range rs.ScopeSpans().All() {
		for _, s := range ss.Spans().All() {
			fn("span name", s.Name())
			fn("status message", s.Status().Message())
			maps = append(maps, s.Attributes())
			for _, e := range s.Events().All() {
				maps = append(maps, e.Attributes())
			}
			for _, l := range s.Links().All() {
				maps = append(maps, l.Attributes())
			}
		}
	}
	for _, m := range maps {
		for k, v := range m.All() {
			walk(k, v)
			fn("attribute key", k)
		}
	}
}

// Every string an audit event hands over reaches the span cut at its documented bound, on a
// character boundary, and k8s.audit.truncated_attributes names each attribute that was cut: a
// megabyte user name, user agent, URL, auditID, error or object name makes a span of a few tens
// of kilobytes, not of tens of megabytes.
func TestEveryStringOfAnEventIsCutAtItsBoundAndTheSpanSaysWhich(t *testing.T) {
	td, st := convertOne(t, testConverter(), hostileEvent(huge("a")))
	if td.SpanCount() != 1 || len(st.dropped) != 0 {
		t.Fatalf("%d spans, dropped %v: want the event converted", td.SpanCount(), st.dropped)
	}
	rs := td.ResourceSpans().At(0)
	total := 0
	walkStrings(rs, func(key, v string) {
		total += len(v)
		limit := maxMessageBytes + len(": ") + maxReasonBytes // the status message is reason: message
		if key == "k8s.object.name" || key == "k8s.namespace.name" || strings.HasPrefix(key, "k8s.deployment.") {
			limit = maxNameBytes
		}
		if len(v) > limit {
			t.Errorf("%s: %d bytes, over its bound %d", key, len(v), limit)
		}
		if !utf8.ValidString(v) {
			t.Errorf("%s: cut inside a character", key)
		}
	})
	if total > 320<<10 { // the sum of the bounds: about 300 KB
		t.Errorf("the span holds %d bytes of strings", total)
	}
	s := onlySpan(t, td)
	a := s.Attributes()
	for key, want := range map[string]int{
		model.AttrAuditID: MaxAuditIDBytes, model.AttrUserName: maxUserBytes, model.AttrAuditImpersonatedUser: maxUserBytes,
		model.AttrUserAgent: maxUserAgentBytes, model.AttrURLPath: maxURLPathBytes, model.AttrClientAddress: maxClientAddressBytes,
		model.AttrAuditLevel: maxShortBytes, model.AttrObjectResourceVersion: maxShortBytes, model.AttrAuditSubresource: maxTokenBytes,
		attrAuthzDecision: maxShortBytes, attrAuthzReason: maxAnnotationValueSize, attrAdmissionPolicyFails: maxAnnotationValueSize,
		model.AttrObjectName: maxNameBytes, model.AttrNamespaceName: maxNameBytes, model.AttrObjectUID: maxTokenBytes,
	} {
		if v := attrStr(a, key); len(v) > want || len(v) < want-3-16-3 {
			t.Errorf("%s: %d bytes, want cut at %d", key, len(v), want)
		}
	}
	if n := mustSlice(t, a, model.AttrAuditUserGroups).Len(); n != maxGroups {
		t.Errorf("%d groups, want %d", n, maxGroups)
	}
	if n := mustSlice(t, a, attrAdmissionWebhooks).Len(); n != maxWebhooks {
		t.Errorf("%d webhooks, want %d", n, maxWebhooks)
	}
	keyed := 0
	for k := range a.All() {
		if strings.HasPrefix(k, attrPodSecurityPrefix) || strings.HasPrefix(k, attrLatencyPrefix) {
			keyed++
		}
	}
	if keyed != 2*maxKeyedAttributes {
		t.Errorf("%d pod security and latency attributes, want %d", keyed, 2*maxKeyedAttributes)
	}
	errEvent, _ := spanEvent(s, model.EventAuditError)
	if n := mustSlice(t, errEvent.Attributes(), attrErrorCauses).Len(); n != maxCauses {
		t.Errorf("%d causes, want %d", n, maxCauses)
	}
	var cut []string
	for _, v := range mustSlice(t, a, attrTruncatedAttributes).All() {
		cut = append(cut, v.Str())
	}
	for _, key := range []string{
		model.AttrAuditID, model.AttrUserName, model.AttrAuditUserGroups, model.AttrAuditImpersonatedUser, model.AttrUserAgent,
		model.AttrURLPath, model.AttrClientAddress, model.AttrAuditLevel, model.AttrAuditSubresource, model.AttrObjectResourceVersion,
		model.AttrObjectName, model.AttrNamespaceName, model.AttrObjectUID, model.AttrObjectAPIVersion,
		attrErrorReason, attrErrorMessage, attrErrorCauses, attrAuthzDecision, attrAuthzReason, attrAdmissionPolicyFails,
		attrAdmissionWebhooks, attrPodSecurityPrefix + "k0",
	} {
		if !slices.Contains(cut, key) {
			t.Errorf("%s is not in %s %v", key, attrTruncatedAttributes, cut)
		}
	}
	if want := model.AuditSpanID(hostileEvent(huge("a")).AuditID); s.SpanID() != want {
		t.Errorf("span ID %s, want the one derived from the whole auditID %s", s.SpanID(), want)
	}
}

func mustSlice(t *testing.T, m pcommon.Map, key string) pcommon.Slice {
	t.Helper()
	v, ok := m.Get(key)
	if !ok || v.Type() != pcommon.ValueTypeSlice {
		t.Fatalf("%s: absent or not a slice", key)
	}
	return v.Slice()
}

// An identity over its bound keeps its beginning and a hash of the whole: the same long name is
// the same object on every conversion, and two long names that begin alike stay two objects.
func TestALongNameIsCutWithAHashSoObjectsStayApart(t *testing.T) {
	long := strings.Repeat("n", 2*maxNameBytes)
	create := func(id, name string) Event {
		return event(id, "create", "alice", objectReference{Resource: "configmaps", Namespace: "default", Name: name, APIVersion: "v1"}, 201)
	}
	names := map[string]pcommon.TraceID{}
	for i, name := range []string{long + "a", long + "b", long + "a"} {
		s := onlySpan(t, first(convertOne(t, testConverter(), create(fmt.Sprint(i), name))))
		got := attrStr(s.Attributes(), model.AttrObjectName)
		if len(got) > maxNameBytes || !strings.HasPrefix(got, long[:maxNameBytes-3-16]+"…") {
			t.Fatalf("name cut to %d bytes as %q…", len(got), got[:20])
		}
		if id, ok := names[got]; ok && id != s.TraceID() {
			t.Fatalf("the same name in two traces")
		}
		names[got] = s.TraceID()
	}
	if len(names) != 2 {
		t.Fatalf("%d distinct names, want 2 (a and b apart, a twice the same)", len(names))
	}
}

func first(td ptrace.Traces, _ Stats) ptrace.Traces { return td }

// An event under every bound is not marked: the recorded scenarios' goldens, which the golden
// tests compare whole, carry no k8s.audit.truncated_attributes either.
func TestAnEventWithinEveryBoundIsNotMarked(t *testing.T) {
	s := onlySpan(t, first(convertOne(t, testConverter(), event("a", "update", "alice", deployRef("1"), 200))))
	if _, ok := s.Attributes().Get(attrTruncatedAttributes); ok {
		t.Fatalf("marked: %v", s.Attributes().AsRaw())
	}
}

// An auditID over the bound never keys a duplicate table, and never counts as a redelivery of
// another request whose cut auditID is the same.
func TestAnAuditIDOverTheBoundIsNoDedupKey(t *testing.T) {
	for id, want := range map[string]bool{
		"":                             false,
		"4f0c5a54-3b0e-4c1e-9a57-0d3c": true,
		strings.Repeat("a", 128):       true,
		strings.Repeat("a", 129):       false,
	} {
		if got := DedupAuditID(id); got != want {
			t.Errorf("DedupAuditID(%d bytes) = %v, want %v", len(id), got, want)
		}
	}
	e := &cacheEntry{history: []write{newWrite(strings.Repeat("a", MaxAuditIDBytes), "", "", pcommon.TraceID{}, pcommon.SpanID{})}}
	if e.wrote(strings.Repeat("a", MaxAuditIDBytes) + "b") {
		t.Fatal("a long auditID taken for the redelivery of the write whose cut auditID it shares")
	}
	if got := LogAuditID(strings.Repeat("é", 1000)); len(got) > MaxAuditIDBytes {
		t.Fatalf("LogAuditID kept %d bytes", len(got))
	}
}

// FuzzBounds: whatever a string holds, its cut is within the bound, valid UTF-8 when the string
// was, marked when and only when it was cut; an identity's cut is the same for the same value;
// and the resource and group checks never accept an upper-case letter, a slash or a dot in a
// resource.
func FuzzBounds(f *testing.F) {
	for _, seed := range []string{"", "pods", "Secrets", "secrets/..", "apps", "example..com", strings.Repeat("é", 300), "a\x00b"} {
		f.Add(seed, 64)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		n = 20 + abs(n)%600 // room for "…" and the hash
		var c cuts
		got := c.text("k", s, n)
		if len(got) > n || (len(s) <= n) != (got == s) || (len(c.keys) == 1) != (got != s) {
			t.Fatalf("text(%q, %d) = %q, marked %v", s, n, got, c.keys)
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("text cut inside a character: %q", got)
		}
		id := c.identity("k", s, n)
		if len(id) > n || id != (*cuts)(nil).identity("k", s, n) {
			t.Fatalf("identity(%q, %d) = %q", s, n, id)
		}
		if validResource(s) && strings.ContainsAny(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ/._") {
			t.Fatalf("validResource(%q)", s)
		}
		if validGroup(s) && (strings.ContainsAny(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ/_") || strings.Contains(s, "..")) {
			t.Fatalf("validGroup(%q)", s)
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

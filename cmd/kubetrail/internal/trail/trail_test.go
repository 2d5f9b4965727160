package trail

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/kubetrail/kubetrail/internal/model"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestResolveKindAcceptsWhatKubectlUsersType(t *testing.T) {
	tests := []struct {
		in   string
		want Kind
	}{
		{"deployment", Kind{"Deployment", "apps", "deployments", true, true}},
		{"deploy", Kind{"Deployment", "apps", "deployments", true, true}},
		{"Deployment", Kind{"Deployment", "apps", "deployments", true, true}},
		{"deployments.apps", Kind{"Deployment", "apps", "deployments", true, true}},
		{"deployments.v1.apps", Kind{"Deployment", "apps", "deployments", true, true}},
		{"po", Kind{"Pod", "", "pods", true, true}},
		{"ingress", Kind{"Ingress", "networking.k8s.io", "ingresses", true, true}},
		{"ing", Kind{"Ingress", "networking.k8s.io", "ingresses", true, true}},
		{"netpol", Kind{"NetworkPolicy", "networking.k8s.io", "networkpolicies", true, true}},
		{"networkpolicy", Kind{"NetworkPolicy", "networking.k8s.io", "networkpolicies", true, true}},
		{"cronjob", Kind{"CronJob", "batch", "cronjobs", true, true}},
		{"cj", Kind{"CronJob", "batch", "cronjobs", true, true}},
		{"job", Kind{"Job", "batch", "jobs", true, true}},
		{"ev", Kind{"Event", "", "events", true, true}},
		{"hpa", Kind{"HorizontalPodAutoscaler", "autoscaling", "horizontalpodautoscalers", true, true}},
		{"pdb", Kind{"PodDisruptionBudget", "policy", "poddisruptionbudgets", true, true}},
		{"pvc", Kind{"PersistentVolumeClaim", "", "persistentvolumeclaims", true, true}},
		{"sa", Kind{"ServiceAccount", "", "serviceaccounts", true, true}},
		// Cluster-scoped kinds have no namespace.
		{"no", Kind{"Node", "", "nodes", false, true}},
		{"ns", Kind{"Namespace", "", "namespaces", false, true}},
		{"pv", Kind{"PersistentVolume", "", "persistentvolumes", false, true}},
		{"clusterrole", Kind{"ClusterRole", "rbac.authorization.k8s.io", "clusterroles", false, true}},
		{"crd", Kind{"CustomResourceDefinition", "apiextensions.k8s.io", "customresourcedefinitions", false, true}},
		// An unknown kind is taken as typed, and as namespaced.
		{"Widget", Kind{"Widget", "", "", true, false}},
		{"widget", Kind{"Widget", "", "", true, false}},
		{"Widget.example.com", Kind{"Widget", "example.com", "", true, false}},
		{"widgets.v1alpha1.example.com", Kind{"Widgets", "example.com", "", true, false}},
	}
	for _, tc := range tests {
		if got := ResolveKind(tc.in); got != tc.want {
			t.Errorf("ResolveKind(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestFormatDurationKeepsThePrecisionAReaderNeeds(t *testing.T) {
	for d, want := range map[time.Duration]string{
		189 * time.Microsecond:   "189µs",
		5835 * time.Microsecond:  "5.8ms",
		3 * time.Millisecond:     "3ms",
		1721 * time.Millisecond:  "1.72s",
		57240 * time.Millisecond: "57.24s",
		90 * time.Second:         "1m30s",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestJaegerTraceIDsWithoutLeadingZerosParse(t *testing.T) {
	id, ok := parseTraceID("abc")
	if !ok || id.String() != strings.Repeat("0", 29)+"abc" {
		t.Fatalf("got %s %v", id, ok)
	}
	if _, ok := parseTraceID("xyz"); ok {
		t.Fatal("a non-hex ID parsed")
	}
}

func TestInlineDiffShortensLongValuesAndCountsTheRest(t *testing.T) {
	s := &Span{Events: []Event{{Name: "k8s.object.diff", Attrs: map[string]any{
		attrDiffPaths: []any{"spec.replicas", "a", "b", "c"},
		attrDiffOld:   []any{"3", "", strings.Repeat("x", 100), "1"},
		attrDiffNew:   []any{"6", "1", "2", "2"},
		attrDiffCount: int64(9),
	}}}}
	got := InlineDiff(s)
	want := "spec.replicas 3→6, a ∅→1, b " + strings.Repeat("x", maxValue-1) + "…→2 +6 more"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

// The readiness of one object, replayed from a create snapshot and the diff paths the receiver
// writes: whole lists, one keyed element, one field of it, removed fields.
func TestObjectReadinessFollowsTheDiffs(t *testing.T) {
	diff := func(paths, news []any) *Span {
		return &Span{Events: []Event{{Name: "k8s.object.diff", Attrs: map[string]any{attrDiffPaths: paths, attrDiffNew: news}}}}
	}
	snapshot := &Span{Events: []Event{{Name: "k8s.object.snapshot", Attrs: map[string]any{attrObjectBody: `{"spec":{"replicas":2},"status":{}}`}}}}
	st := newObjectState()
	step := func(s *Span, kind string, want bool) {
		t.Helper()
		st.observe(s)
		if got, known, why := st.ready(kind); got != want || !known {
			t.Fatalf("%s after %v: ready %v (known %v, %q), want %v", kind, s.Events[0].Attrs, got, known, why, want)
		}
	}
	step(snapshot, "Deployment", false)
	step(diff([]any{"status.replicas", "status.updatedReplicas", "status.readyReplicas"}, []any{"2", "2", "1"}), "Deployment", false)
	step(diff([]any{"status.readyReplicas"}, []any{"2"}), "Deployment", true)
	step(diff([]any{"spec.replicas"}, []any{"4"}), "Deployment", false)
	step(diff([]any{"spec.replicas", "status.readyReplicas", "status.replicas", "status.updatedReplicas"}, []any{"0", "", "", ""}), "Deployment", true)

	st = newObjectState()
	step(&Span{Events: []Event{{Name: "k8s.object.snapshot", Attrs: map[string]any{attrObjectBody: `{"spec":{},"status":{"phase":"Pending"}}`}}}}, "Pod", false)
	step(diff([]any{"status.conditions"}, []any{`[{"type":"PodScheduled","status":"True"},{"type":"Ready","status":"False"}]`}), "Pod", false)
	step(diff([]any{"status.conditions[type=Ready].status"}, []any{`"True"`}), "Pod", true)
	step(diff([]any{"status.conditions[type=Ready]"}, []any{""}), "Pod", false)
	step(diff([]any{"status.conditions[type=Ready]"}, []any{`{"type":"Ready","status":"True"}`}), "Pod", true)
	step(diff([]any{"status.conditions[type=Ready].status", "status.phase"}, []any{`"False"`, `"Succeeded"`}), "Pod", true) // done: nothing waits on it

	if _, known, _ := newObjectState().ready("CronJob"); known {
		t.Fatal("a CronJob's readiness is known")
	}
}

// FindGeneration's errors are ErrNoSpans and say what to do: the generations in range, or that
// none of the spans tells one.
func TestFindGenerationSaysWhatIsInRange(t *testing.T) {
	gens := []Generation{{N: 2}, {N: 3}}
	if g, err := FindGeneration(gens, 3, "Deployment default/web"); err != nil || g.N != 3 {
		t.Fatalf("generation 3: %+v, %v", g, err)
	}
	for _, tc := range []struct {
		gens []Generation
		want string
	}{
		{gens, "generations in range: 2, 3"},
		{nil, "no span in range carries k8s.object.generation"},
	} {
		_, err := FindGeneration(tc.gens, 7, "Deployment default/web")
		if !errors.Is(err, ErrNoSpans) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("generations %v: %v, want ErrNoSpans saying %q", tc.gens, err, tc.want)
		}
	}
}

// FuzzEscape: whatever span data holds, Escape's output has no control character, no bidi
// control and no byte that is not UTF-8, and text without any is left as it is.
func FuzzEscape(f *testing.F) {
	for _, seed := range []string{"Pod default/web", "\x1b]0;x\a", "a\r\nb", "\u202eevil", "\xff\xfe", "✗ → …"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Escape(s)
		if !utf8.ValidString(got) {
			t.Fatalf("Escape(%q) = %q is not UTF-8", s, got)
		}
		for _, r := range got {
			if unsafeRune(r, utf8.RuneLen(r)) {
				t.Fatalf("Escape(%q) = %q holds %U", s, got, r)
			}
		}
		clean := true
		for i, r := range s {
			_, size := utf8.DecodeRuneInString(s[i:])
			clean = clean && !unsafeRune(r, size)
		}
		if clean != (got == s) {
			t.Fatalf("Escape(%q) = %q", s, got)
		}
	})
}

// Of several objects that had the name, the one meant is the one whose activity is the latest:
// object spans start at their window's start, which says nothing of which object came last
// (two in one window tie; a collector with shorter windows starts its spans later).
func TestPickUIDTakesTheObjectWithTheLatestActivity(t *testing.T) {
	w := time.Date(2026, 11, 21, 10, 30, 0, 0, time.UTC)
	span := func(typ, uid string, at time.Duration) *Span {
		return &Span{Type: typ, Start: w.Add(at), Object: model.Object{Kind: "Deployment", Name: "demo", UID: uid}}
	}
	tests := []struct {
		name       string
		objects    []*Span
		activity   []*Span
		want       string
		wantOthers []string
	}{
		{"one window: the later activity wins the tie of the window starts",
			[]*Span{span(model.SpanTypeObject, "a", 0), span(model.SpanTypeObject, "b", 0)},
			[]*Span{span(model.SpanTypeAudit, "a", time.Minute), span(model.SpanTypeAudit, "b", 10*time.Minute)},
			"b", []string{"a"}},
		{"a shorter window's later start does not make its object the later one",
			[]*Span{span(model.SpanTypeObject, "a", 20*time.Minute), span(model.SpanTypeObject, "b", 0)},
			[]*Span{span(model.SpanTypeEvent, "a", 20*time.Minute+time.Second), span(model.SpanTypeAudit, "b", 25*time.Minute)},
			"b", []string{"a"}},
		{"without activity, the window's start",
			[]*Span{span(model.SpanTypeObject, "a", 0), span(model.SpanTypeObject, "b", 30*time.Minute)},
			nil, "b", []string{"a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, others := pickUID(tc.objects, append(slices.Clone(tc.objects), tc.activity...))
			if got != tc.want || !slices.Equal(others, tc.wantOthers) {
				t.Fatalf("picked %s (others %v), want %s (others %v)", got, others, tc.want, tc.wantOthers)
			}
		})
	}
}

// A refused write's diff event marked attempted is what it tried: shown as "tried", with what
// refused it, and never read as a change (the tree's diff, the manifest, readiness, the feed).
func TestRefusedWriteShowsWhatItTried(t *testing.T) {
	msg := `deployments.apps "demo" is forbidden: ValidatingAdmissionPolicy 'max-replicas' with binding 'max-replicas' denied request: failed expression: object.spec.replicas <= 10`
	s := &Span{Type: model.SpanTypeAudit, Name: "patch deployments/scale", Error: true, StatusMessage: "Invalid: " + msg,
		Attrs: map[string]any{model.AttrAuditVerb: "patch", model.AttrAuditSubresource: "scale", model.AttrHTTPStatusCode: "422", model.AttrUserName: "alice"},
		Events: []Event{
			{Name: model.EventAuditError, Attrs: map[string]any{attrErrReason: "Invalid", attrErrMsg: msg}},
			{Name: model.EventObjectDiff, Attrs: map[string]any{attrDiffPaths: []any{"spec.replicas"}, attrDiffOld: []any{"2"}, attrDiffNew: []any{"40"},
				attrDiffCount: int64(1), model.AttrDiffAttempted: true}},
		}}
	if c, _ := s.Diff(); len(c) != 0 {
		t.Fatalf("a refused write changed nothing: %v", c)
	}
	if c, n := s.Attempted(); len(c) != 1 || n != 1 || c[0] != (Change{Path: "spec.replicas", Old: "2", New: "40"}) {
		t.Fatalf("attempted = %v %d", c, n)
	}
	line := activityLine(s)
	if want := "tried spec.replicas 2→40, denied by ValidatingAdmissionPolicy max-replicas: failed expression: object.spec.replicas <= 10"; !strings.Contains(line, want) {
		t.Fatalf("line %q lacks %q", line, want)
	}
	if _, ok := diffEvent(s); ok {
		t.Fatal("the manifest must not apply an attempted diff")
	}
	w := WriteOf(s)
	if len(w.Changes) != 0 || len(w.Tried) != 1 || !strings.Contains(ChangeLine(w, false, 0), "✗ tried spec.replicas 2→40: ") {
		t.Fatalf("write %+v, line %q", w, ChangeLine(w, false, 0))
	}
	page := PageTree(&Node{Object: model.Object{Kind: "Deployment", Namespace: "default", Name: "demo"}, Spans: []*Span{s}}, nil)
	if ps := page.Spans[0]; len(ps.Diff) != 0 || len(ps.Tried) != 1 || ps.Tried[0].New != "40" || !strings.HasPrefix(ps.Msg, "denied by ValidatingAdmissionPolicy max-replicas: failed expression") {
		t.Fatalf("page span %+v", ps)
	}
	var html strings.Builder
	if err := WriteHTML(&html, &Node{Object: model.Object{Kind: "Deployment", Namespace: "default", Name: "demo"}, Spans: []*Span{s}}, Header{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(html.String(), `<span class="tried">tried <span class="diff">spec.replicas <b>2</b>→40</span></span>`) {
		t.Fatalf("the page lacks the tried change:\n%s", html.String())
	}
	field, err := ParseFieldPath("spec.replicas")
	if err != nil {
		t.Fatal(err)
	}
	if !(ChangeQuery{Field: field, Errors: true}).matches(s) {
		t.Fatal("--errors --field spec.replicas finds the refused scale by what it tried")
	}
	if other, _ := ParseFieldPath("spec.paused"); (ChangeQuery{Field: other}).matches(s) {
		t.Fatal("a refused write matches only the paths it tried")
	}
	by, why := RefusedBy(&Span{Error: true, Events: []Event{{Name: model.EventAuditError, Attrs: map[string]any{attrErrMsg: `admission webhook "images.example.com" denied the request: image b is not signed`}}}})
	if by != "denied by admission webhook images.example.com" || why != "image b is not signed" {
		t.Fatalf("by %q why %q", by, why)
	}
	if by, _ := RefusedBy(&Span{Error: true, StatusMessage: "Conflict: the object has been modified"}); by != "" {
		t.Fatalf("a conflict names no refuser: %q", by)
	}
}

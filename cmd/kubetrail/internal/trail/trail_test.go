package trail

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestResolveKindAcceptsWhatKubectlUsersType(t *testing.T) {
	tests := []struct{ in, kind, group, resource string }{
		{"deployment", "Deployment", "apps", "deployments"},
		{"deploy", "Deployment", "apps", "deployments"},
		{"Deployment", "Deployment", "apps", "deployments"},
		{"deployments.apps", "Deployment", "apps", "deployments"},
		{"po", "Pod", "", "pods"},
		{"ingress", "Ingress", "networking.k8s.io", "ingresses"},
		{"networkpolicy", "NetworkPolicy", "networking.k8s.io", "networkpolicies"},
		{"cronjob", "CronJob", "batch", "cronjobs"},
		{"Widget", "Widget", "", ""},
		{"widget", "Widget", "", ""},
	}
	for _, tc := range tests {
		k, g, r := ResolveKind(tc.in)
		if k != tc.kind || g != tc.group || r != tc.resource {
			t.Errorf("ResolveKind(%q) = %q %q %q, want %q %q %q", tc.in, k, g, r, tc.kind, tc.group, tc.resource)
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

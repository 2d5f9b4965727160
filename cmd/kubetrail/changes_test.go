package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
)

// changesCases are the change feeds and object histories recorded as golden files, from the
// processor's recorded traces of the testbed's scenarios.
var changesCases = []struct {
	name, scenario string
	args           []string
}{
	{"changes.deployment.txt", "deployment", []string{"changes", "-A"}},
	{"changes.deployment.spec.txt", "deployment", []string{"changes", "deployments", "--field", "spec"}},
	{"changes.deployment.image.json", "deployment", []string{"changes", "--field", "spec.template.spec.containers[name=nginx].image", "-o", "json"}},
	{"changes.conflict.errors.txt", "conflict", []string{"changes", "--errors"}},
	{"changes.job.admin.txt", "job", []string{"changes", "-A", "--user", "kubernetes-admin", "--verb", "create"}},
	{"show.deployment.at.yaml", "deployment", []string{"show", "deploy/demo", "--at", "2026-11-21T10:45:55Z"}},
	{"show.deployment.diff.txt", "deployment", []string{"show", "deploy/demo", "--diff", "2026-11-21T10:45:54.7Z", "2026-11-21T10:45:55Z"}},
	{"show.pod.at.json", "unschedulable", []string{"show", "pod/pending", "--at", "2026-11-21T10:49:00.3Z", "-o", "json"}},
}

func TestChangeFeedAndManifestOfTheRecordedScenariosMatchTheGolden(t *testing.T) {
	for _, c := range changesCases {
		t.Run(c.name, func(t *testing.T) {
			src := "file=" + recordedFile(t, c.scenario)
			code, out, errOut := kubetrail(t, append(c.args, "--source", src, "--cluster", "testbed")...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			compareGolden(t, c.name, out)
		})
	}
}

// TestChangesFiltersEachKeepOnlyWhatTheyName reads the deployment scenario's feed whole, then
// checks each filter against it: every write a filter keeps matches it, and it keeps all of
// those that do.
func TestChangesFiltersEachKeepOnlyWhatTheyName(t *testing.T) {
	src := "file=" + recordedFile(t, "deployment")
	feed := func(args ...string) []trail.Write {
		t.Helper()
		code, out, errOut := kubetrail(t, append([]string{"changes", "--source", src, "-o", "json", "--limit", "1000"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		var doc struct {
			Matched int
			Writes  []trail.Write
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatal(err)
		}
		if doc.Matched != len(doc.Writes) {
			t.Fatalf("%v: matched %d, shown %d", args, doc.Matched, len(doc.Writes))
		}
		return doc.Writes
	}
	all := feed("-A")
	if len(all) < 100 {
		t.Fatalf("the deployment scenario's feed holds %d writes", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i].Time.After(all[i-1].Time) {
			t.Fatalf("not newest first at %d: %s after %s", i, all[i].Time, all[i-1].Time)
		}
	}
	filters := []struct {
		args []string
		keep func(w trail.Write) bool
	}{
		{[]string{"-n", "default"}, func(w trail.Write) bool { return w.Namespace == "default" }},
		{[]string{"-A", "pods"}, func(w trail.Write) bool { return w.Kind == "Pod" }},
		{[]string{"-A", "deploy/demo"}, func(w trail.Write) bool { return w.Kind == "Deployment" && w.Name == "demo" }},
		{[]string{"-A", "--user", "deployment-controller"}, func(w trail.Write) bool {
			return w.User == "system:serviceaccount:kube-system:deployment-controller"
		}},
		{[]string{"-A", "--user", "system:serviceaccount:kube-system:deployment-controller"}, func(w trail.Write) bool {
			return w.User == "system:serviceaccount:kube-system:deployment-controller"
		}},
		{[]string{"-A", "--verb", "delete"}, func(w trail.Write) bool { return w.Verb == "delete" }},
		{[]string{"-A", "--errors"}, func(w trail.Write) bool { return w.Code >= 400 }},
		{[]string{"-A", "--field", "status.readyReplicas"}, func(w trail.Write) bool {
			for _, c := range w.Changes {
				if c.Path == "status.readyReplicas" || c.Path == "status" {
					return true
				}
			}
			return false
		}},
		{[]string{"-A", "--since", "2026-11-21T10:45:55Z", "--until", "2026-11-21T10:45:55.5Z"}, func(w trail.Write) bool {
			return w.Time.Format("15:04:05.000") >= "10:45:55.000" && w.Time.Format("15:04:05.000") <= "10:45:55.500"
		}},
		{[]string{"-A", "--cluster", "elsewhere"}, func(trail.Write) bool { return false }},
	}
	for _, f := range filters {
		var want []string
		for _, w := range all {
			if f.keep(w) {
				want = append(want, w.SpanID)
			}
		}
		var got []string
		for _, w := range feed(f.args...) {
			got = append(got, w.SpanID)
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%v keeps %d writes, want %d", f.args, len(got), len(want))
		}
		if len(want) == 0 && f.args[1] != "--cluster" {
			t.Errorf("%v: the recorded feed holds no such write; the check proves nothing", f.args)
		}
	}
}

func TestChangesLimitKeepsTheNewestAndSaysSo(t *testing.T) {
	src := "file=" + recordedFile(t, "deployment")
	code, out, errOut := kubetrail(t, "changes", "-A", "--source", src, "--limit", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "the newest 3 shown") {
		t.Fatalf("want a header and 3 writes:\n%s", out)
	}
	if !strings.Contains(errOut, "writes matched; showing the newest 3 (--limit)") {
		t.Fatalf("stderr %q does not say the feed was cut", errOut)
	}
}

func TestChangesAndShowRefuseBadInput(t *testing.T) {
	src := "file=" + recordedFile(t, "deployment")
	closed := closedPort(t)
	checkErrorCases(t, []errorCase{
		{"a malformed --since", []string{"changes", "--source", src, "--since", "last tuesday"}, 2, []string{"--since", "RFC 3339"}},
		{"a malformed field path", []string{"changes", "--source", src, "--field", "spec..replicas"}, 2, []string{"--field", `"spec..replicas" at byte 5`}},
		{"a list matched by another key", []string{"changes", "--source", src, "--field", "spec.containers[image=x]"}, 2, []string{"lists are matched by name or type"}},
		{"a verb that is not a write", []string{"changes", "--source", src, "--verb", "get"}, 2, []string{"create, update, patch, delete, deletecollection"}},
		{"-A with -n", []string{"changes", "--source", src, "-A", "-n", "shop"}, 2, []string{"choose one"}},
		{"an unknown output", []string{"changes", "--source", src, "-o", "yaml"}, 2, []string{"want text or json"}},
		{"a backend that is down", []string{"changes", "--source", "jaeger=http://" + closed}, 1, []string{"backend unreachable", closed}},
		{"a malformed --at", []string{"show", "deploy/demo", "--source", src, "--at", "noon"}, 2, []string{"--at", "RFC 3339"}},
		{"--diff without its times", []string{"show", "deploy/demo", "--source", src, "--diff", "10:00"}, 2, []string{"--diff takes two times"}},
		{"--diff with T2 before T1", []string{"show", "deploy/demo", "--source", src, "--diff", "2026-11-21T11:00:00Z", "2026-11-21T10:00:00Z"}, 2, []string{"T2 is not after T1"}},
		{"--at before the create", []string{"show", "deploy/demo", "--source", src, "--at", "2026-11-21T10:00:00Z"}, 1, []string{"did not exist yet", "kubernetes-admin create at 10:45:54.317"}},
		{"show of an unknown object", []string{"show", "deploy/nope", "--source", src, "--at", "2026-11-21T10:46:00Z"}, 1, []string{"unknown object"}},
		{"a backend that is down, for show", []string{"show", "deploy/demo", "--source", "jaeger=http://" + closed}, 1, []string{"backend unreachable"}},
		{"serve with a --jaeger-ui that is no URL", []string{"serve", "--source", src, "--jaeger-ui", "javascript:alert(1)"}, 2, []string{"--jaeger-ui", "want an http or https URL"}},
		{"serve with a malformed --listen", []string{"serve", "--source", src, "--listen", "7474"}, 2, []string{"--listen", "HOST:PORT"}},
	})
}

// TestChangesThroughJaegerSearchesEveryKindWithTheBackendsFilters reads the feed from a Jaeger
// query API serving the recorded traces: every kind Jaeger lists is searched, the namespace,
// cluster and full user name go to the backend as tags, and the feed is the one the file gives.
func TestChangesThroughJaegerSearchesEveryKindWithTheBackendsFilters(t *testing.T) {
	td, err := golden.ReadTraces(filepath.Join(recorded, "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	srv := newFakeJaeger(t, td)
	args := []string{"changes", "-n", "default", "--cluster", "testbed", "--user", "system:serviceaccount:kube-system:deployment-controller", "--since", "2026-11-21T10:00:00Z", "--until", "2026-11-21T11:00:00Z"}
	code, out, errOut := kubetrail(t, append(args, "--source", "jaeger="+srv.URL)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	_, fromFile, _ := kubetrail(t, append(args, "--source", "file="+recordedFile(t, "deployment"))...)
	if out != fromFile || !strings.Contains(out, "deployment-controller  update status") {
		t.Fatalf("the feed through Jaeger differs from the file's:\n%s\n--- file:\n%s", head(out, 5), head(fromFile, 5))
	}
	f := jaegerCalls[srv.URL]
	if f.searches < 3 || f.services != 1 {
		t.Fatalf("%d searches after %d service lists; want every kind searched", f.searches, f.services)
	}
	for _, tags := range f.tags {
		var m map[string]string
		_ = json.Unmarshal([]byte(tags), &m)
		if m["k8s.namespace.name"] != "default" || m["k8s.cluster.name"] != "testbed" || m["user.name"] != "system:serviceaccount:kube-system:deployment-controller" {
			t.Fatalf("a search without the backend's filters: %s", tags)
		}
	}
}

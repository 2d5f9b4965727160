package main

import (
	"encoding/json"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func buildInfo(mainVersion string, settings ...string) func() (*debug.BuildInfo, bool) {
	bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "github.com/kubetrail/kubetrail", Version: mainVersion}}
	for i := 0; i+1 < len(settings); i += 2 {
		bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
	}
	return func() (*debug.BuildInfo, bool) { return bi, true }
}

func TestReadVersion(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	tests := []struct {
		name    string
		v, c, d string
		read    func() (*debug.BuildInfo, bool)
		want    versionInfo
	}{
		{"injected values win over the recorded ones", "0.1.0", "feedface", "2026-11-28T10:00:00Z",
			buildInfo("(devel)", "vcs.revision", rev, "vcs.time", "2020-01-01T00:00:00Z", "vcs.modified", "true"),
			versionInfo{Version: "0.1.0", Commit: "feedface", BuildDate: "2026-11-28T10:00:00Z", GoVersion: "go1.99.1"}},
		{"the injected commit is the recorded one: its tree state is told", "0.1.0", rev, "2026-11-28T10:00:00Z",
			buildInfo("(devel)", "vcs.revision", rev, "vcs.modified", "false"),
			versionInfo{Version: "0.1.0", Commit: rev, TreeState: "clean", BuildDate: "2026-11-28T10:00:00Z", GoVersion: "go1.99.1"}},
		{"go build in a repository: the vcs stamps", "", "", "",
			buildInfo("(devel)", "vcs.revision", rev, "vcs.time", "2026-11-27T09:08:07Z", "vcs.modified", "true"),
			versionInfo{Version: "unknown", Commit: rev, TreeState: "dirty", BuildDate: "2026-11-27T09:08:07Z", GoVersion: "go1.99.1"}},
		{"go install MODULE@VERSION: the module's version", "", "", "",
			buildInfo("v0.2.0"),
			versionInfo{Version: "0.2.0", Commit: "unknown", BuildDate: "unknown", GoVersion: "go1.99.1"}},
		{"no build information", "", "", "",
			func() (*debug.BuildInfo, bool) { return nil, false },
			versionInfo{Version: "unknown", Commit: "unknown", BuildDate: "unknown", GoVersion: runtime.Version()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.want.Platform = runtime.GOOS + "/" + runtime.GOARCH
			if got := readVersion(tc.v, tc.c, tc.d, tc.read); got != tc.want {
				t.Errorf("readVersion = %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestVersionCommand(t *testing.T) {
	code, out, errOut := kubetrail(t, "version")
	if code != 0 || errOut != "" {
		t.Fatalf("version: exit %d, stderr %q", code, errOut)
	}
	v := buildVersion()
	for _, want := range []string{"kubetrail version " + v.Version + "\n", "commit: " + v.Commit, "built: " + v.BuildDate, "go: " + runtime.Version()} {
		if !strings.Contains(out, want) {
			t.Errorf("version printed %q, want it to hold %q", out, want)
		}
	}
	if code, flagOut, _ := kubetrail(t, "--version"); code != 0 || flagOut != out {
		t.Errorf("--version: exit %d, %q; want what version prints, %q", code, flagOut, out)
	}
	if code, pluginOut, _ := invoke(t, "/usr/local/bin/kubectl-trail", "version"); code != 0 || !strings.HasPrefix(pluginOut, "kubectl trail version ") {
		t.Errorf("kubectl trail version: exit %d, %q", code, pluginOut)
	}

	code, out, errOut = kubetrail(t, "version", "-o", "json")
	if code != 0 {
		t.Fatalf("version -o json: exit %d, stderr %q", code, errOut)
	}
	var got map[string]string
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("version -o json is not a JSON object of strings: %v\n%s", err, out)
	}
	for _, k := range []string{"version", "commit", "buildDate", "goVersion", "platform"} {
		if got[k] == "" {
			t.Errorf("version -o json has no %q: %s", k, out)
		}
	}
	if got["goVersion"] != runtime.Version() || got["platform"] != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("version -o json: %s", out)
	}

	for _, args := range [][]string{{"version", "-o", "yaml"}, {"version", "extra"}, {"--version", "extra"}} {
		if code, _, errOut := kubetrail(t, args...); code != 2 || errOut == "" {
			t.Errorf("%q: exit %d, stderr %q; want a usage error", args, code, errOut)
		}
	}
}

//go:build dist

package distribution_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kubetrail/kubetrail/pkg/objecttrace"
)

// releaseVersion is builder-config.yaml's dist.version, the one version of a release
// (docs/releasing.md).
func releaseVersion(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "builder-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Dist struct {
			Version string `json:"version"`
		} `json:"dist"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`).MatchString(cfg.Dist.Version) {
		t.Fatalf("builder-config.yaml dist.version %q is not a semantic version without v", cfg.Dist.Version)
	}
	return cfg.Dist.Version
}

// TestOneVersion: the chart (version and appVersion, the image tag it defaults to), the
// Dockerfile's default, pkg/objecttrace's Version(), the built collector's --version and the
// built CLI's version all say builder-config.yaml's dist.version.
func TestOneVersion(t *testing.T) {
	v := releaseVersion(t)
	if got := objecttrace.Version(); got != v {
		t.Errorf("pkg/objecttrace Version() %q, builder-config.yaml dist.version %q (pkg/objecttrace/version.go)", got, v)
	}

	raw, err := os.ReadFile(filepath.Join(root, "distribution", "helm", "kubetrail", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(raw, &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Version != v || chart.AppVersion != v {
		t.Errorf("Chart.yaml version %q, appVersion %q; builder-config.yaml dist.version %q", chart.Version, chart.AppVersion, v)
	}

	f, err := os.Open(filepath.Join(root, "distribution", "image", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var dockerfile string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if arg, ok := strings.CutPrefix(sc.Text(), "ARG VERSION="); ok {
			dockerfile = arg
		}
	}
	if dockerfile != v {
		t.Errorf("the Dockerfile's ARG VERSION=%q, builder-config.yaml dist.version %q", dockerfile, v)
	}

	requireBinary(t)
	out, err := exec.Command(binary, "--version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "otelcol-kubetrail version "+v {
		t.Errorf("otelcol-kubetrail --version: %v, %q; want version %s", err, out, v)
	}

	cli := filepath.Join(root, "bin", "kubetrail")
	out, err = exec.Command(cli, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("%s version -o json: %v (run `make build`)", cli, err)
	}
	var got struct{ Version, Commit, BuildDate string }
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("kubetrail version -o json: %v\n%s", err, out)
	}
	if got.Version != v || !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(got.Commit) || !strings.HasSuffix(got.BuildDate, "Z") {
		t.Errorf("bin/kubetrail version -o json: %s; want version %s, a commit and a UTC build date (the Makefile's -ldflags -X)", out, v)
	}
}

//go:build dist

package distribution_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// builderManifest is the part of an ocb manifest these tests compare.
type builderManifest struct {
	Dist struct {
		Name        string `json:"name"`
		Description string `json:"description"`
		Version     string `json:"version"`
		OutputPath  string `json:"output_path"`
	} `json:"dist"`
	Receivers, Processors, Exporters, Connectors, Extensions, Providers []struct {
		GoMod  string `json:"gomod"`
		Import string `json:"import"`
	}
	Replaces []string `json:"replaces"`
}

// entries lists a manifest's components as "kind gomod import", sorted.
func (m builderManifest) entries() []string {
	var out []string
	for kind, list := range map[string][]struct {
		GoMod  string `json:"gomod"`
		Import string `json:"import"`
	}{"receivers": m.Receivers, "processors": m.Processors, "exporters": m.Exporters, "connectors": m.Connectors, "extensions": m.Extensions, "providers": m.Providers} {
		for _, c := range list {
			out = append(out, strings.TrimSpace(kind+" "+c.GoMod+" "+c.Import))
		}
	}
	sort.Strings(out)
	return out
}

func readManifest(t *testing.T, path string) builderManifest {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m builderManifest
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// TestCloudBuilderConfigIsTheShippedOnePlusTheCloudReceivers: distribution/builder-config-cloud.yaml
// is builder-config.yaml with the cloud receivers (and googlecloudpubsub's text encoding)
// added, under another name and output path, and it has every module a managed example's header
// tells users to add. (It is not built here: the module mirror does not serve those modules.)
func TestCloudBuilderConfigIsTheShippedOnePlusTheCloudReceivers(t *testing.T) {
	base := readManifest(t, filepath.Join(root, "builder-config.yaml"))
	cloud := readManifest(t, filepath.Join(root, "distribution", "builder-config-cloud.yaml"))
	if cloud.Dist.Name == base.Dist.Name || cloud.Dist.OutputPath == base.Dist.OutputPath || cloud.Dist.Version != base.Dist.Version {
		t.Errorf("dist: want another name and output path, the same version: %+v vs %+v", cloud.Dist, base.Dist)
	}
	if !slices.Equal(cloud.Replaces, base.Replaces) {
		t.Errorf("replaces differ:\n%q\n%q", cloud.Replaces, base.Replaces)
	}
	baseEntries, cloudEntries := base.entries(), cloud.entries()
	var added []string
	for _, e := range cloudEntries {
		if !slices.Contains(baseEntries, e) {
			added = append(added, e)
		}
	}
	for _, e := range baseEntries {
		if !slices.Contains(cloudEntries, e) {
			t.Errorf("builder-config-cloud.yaml lacks %s", e)
		}
	}
	const contrib = "github.com/open-telemetry/opentelemetry-collector-contrib/"
	want := []string{
		"extensions " + contrib + "extension/encoding/textencodingextension v0.165.1",
		"receivers " + contrib + "receiver/awscloudwatchreceiver v0.165.1",
		"receivers " + contrib + "receiver/awsfirehosereceiver v0.165.1",
		"receivers " + contrib + "receiver/azureeventhubreceiver v0.165.1",
		"receivers " + contrib + "receiver/googlecloudpubsubreceiver v0.165.1",
	}
	if !slices.Equal(added, want) {
		t.Errorf("added to builder-config.yaml:\n%q\nwant\n%q", added, want)
	}
	// Every "- gomod:" line a managed example's header names is in the cloud manifest.
	files, err := filepath.Glob(filepath.Join(root, "distribution", "examples", "managed", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("examples: %v %v", files, err)
	}
	named := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)^#\s+- gomod: (\S+ \S+)`).FindAllSubmatch(b, -1) {
			named++
			found := false
			for _, e := range cloudEntries {
				found = found || strings.HasSuffix(e, " "+string(m[1]))
			}
			if !found {
				t.Errorf("%s names %s, which builder-config-cloud.yaml lacks", filepath.Base(f), m[1])
			}
		}
	}
	if named < 5 {
		t.Errorf("only %d gomod lines in the managed examples' headers", named)
	}
}

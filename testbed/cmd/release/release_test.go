package main

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

func writeTemp(t *testing.T, dir, name, body string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestArchiveReproducible: the same files give the same bytes, whatever the files' own times;
// the entries are the files' base names, in order.
func TestArchiveReproducible(t *testing.T) {
	dir := t.TempDir()
	bin := writeTemp(t, dir, "kubectl-trail", "#!/bin/sh\n", 0o755)
	lic := writeTemp(t, dir, "LICENSE", "license text\n", 0o600)
	mtime := time.Unix(1764000000, 0)
	a, b := filepath.Join(dir, "a.tar.gz"), filepath.Join(dir, "b.tar.gz")
	if err := writeArchive(a, mtime, []string{bin, lic}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(bin, time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := writeArchive(b, mtime, []string{bin, lic}); err != nil {
		t.Fatal(err)
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ab, bb) {
		t.Error("the same files archived twice differ")
	}
	files, err := archiveFiles(a)
	if err != nil || !slices.Equal(files, []string{"kubectl-trail", "LICENSE"}) {
		t.Errorf("archive holds %q (%v)", files, err)
	}
	if err := writeArchive(b, mtime, []string{bin, filepath.Join(dir, "missing")}); err == nil {
		t.Error("a missing file archived without an error")
	}
}

func TestKrewManifest(t *testing.T) {
	dir := t.TempDir()
	bin := writeTemp(t, dir, "kubectl-trail", "binary", 0o755)
	lic := writeTemp(t, dir, "LICENSE", "license", 0o644)
	var archives []string
	for _, p := range []string{"linux_amd64", "darwin_arm64"} {
		a := filepath.Join(dir, "kubectl-trail_v1.2.3_"+p+".tar.gz")
		if err := writeArchive(a, time.Unix(0, 0), []string{bin, lic}); err != nil {
			t.Fatal(err)
		}
		archives = append(archives, a)
	}
	m, err := krewManifest("1.2.3", "https://example.test/dl/v1.2.3/", archives)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "trail.yaml")
	if err := writeYAML(out, m); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(out)
	var got KrewPlugin
	if err := yaml.UnmarshalStrict(raw, &got); err != nil {
		t.Fatalf("the manifest does not read back: %v\n%s", err, raw)
	}
	if got.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || got.Kind != "Plugin" || got.Metadata.Name != "trail" || got.Spec.Version != "v1.2.3" {
		t.Errorf("manifest head: %+v", got)
	}
	if len(got.Spec.Platforms) != 2 {
		t.Fatalf("%d platforms", len(got.Spec.Platforms))
	}
	for i, p := range got.Spec.Platforms {
		sum, _ := fileSHA256(archives[i])
		wantOS, wantArch, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(archives[i]), "kubectl-trail_v1.2.3_"), ".tar.gz"), "_")
		if p.SHA256 != sum || p.URI != "https://example.test/dl/v1.2.3/"+filepath.Base(archives[i]) || p.Bin != "kubectl-trail" ||
			p.Selector.MatchLabels["os"] != wantOS || p.Selector.MatchLabels["arch"] != wantArch ||
			!slices.Equal(p.Files, []KrewFileOp{{"kubectl-trail", "."}, {"LICENSE", "."}}) {
			t.Errorf("platform %d: %+v", i, p)
		}
	}

	for _, bad := range [][]string{
		{archives[0], archives[0]}, // one platform twice
		{lic},                      // not an archive's name
	} {
		if _, err := krewManifest("1.2.3", "https://example.test", bad); err == nil {
			t.Errorf("krew manifest of %q: no error", bad)
		}
	}
	if _, err := krewManifest("9.9.9", "https://example.test", archives[:1]); err == nil {
		t.Error("an archive of another version made a manifest")
	}
	noBin := filepath.Join(dir, "kubectl-trail_v1.2.3_linux_arm64.tar.gz")
	if err := writeArchive(noBin, time.Unix(0, 0), []string{lic}); err != nil {
		t.Fatal(err)
	}
	if _, err := krewManifest("1.2.3", "https://example.test", []string{noBin}); err == nil {
		t.Error("an archive without kubectl-trail made a manifest")
	}
}

// TestSBOMOfATestBinary: the SBOM of this test binary (a real Go binary with build information)
// lists its modules with the versions and go.sum hashes the build recorded.
func TestSBOMOfATestBinary(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build information in the test binary")
	}
	doc, err := sbom(sbomOptions{version: "1.2.3", commit: "abc", namespace: "https://example.test/sbom", created: time.Unix(1764000000, 0)}, []string{self})
	if err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.CreationInfo.Created != "2025-11-24T16:00:00Z" {
		t.Errorf("document: %s created %s", doc.SPDXVersion, doc.CreationInfo.Created)
	}
	byName := map[string]spdxPackage{}
	ids := map[string]bool{}
	for _, p := range doc.Packages {
		if ids[p.SPDXID] {
			t.Errorf("SPDXID %s twice", p.SPDXID)
		}
		ids[p.SPDXID] = true
		byName[p.Name] = p
	}
	if p := byName["github.com/kubetrail/kubetrail"]; p.VersionInfo != "1.2.3" {
		t.Errorf("the main module: %+v", p)
	}
	checked := 0
	for _, d := range bi.Deps {
		if d.Replace != nil || d.Sum == "" {
			continue
		}
		p, ok := byName[d.Path]
		if !ok {
			t.Errorf("module %s missing", d.Path)
			continue
		}
		raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(d.Sum, "h1:"))
		if p.VersionInfo != d.Version || len(p.Checksums) != 1 || p.Checksums[0].ChecksumValue != hex.EncodeToString(raw) ||
			!slices.ContainsFunc(p.ExternalRefs, func(r spdxExternalRef) bool { return r.ReferenceLocator == "pkg:golang/"+d.Path+"@"+d.Version }) {
			t.Errorf("module %s %s %s: %+v", d.Path, d.Version, d.Sum, p)
		}
		checked++
	}
	if _, ok := byName["sigs.k8s.io/yaml"]; !ok || checked == 0 {
		t.Errorf("checked %d modules; sigs.k8s.io/yaml listed: %v", checked, ok)
	}
	for _, r := range doc.Relationships {
		if !ids[r.RelatedSPDXElement] || (!ids[r.SPDXElementID] && r.SPDXElementID != "SPDXRef-DOCUMENT") {
			t.Errorf("relationship %+v names an unknown element", r)
		}
	}
	if _, err := sbom(sbomOptions{version: "1"}, []string{writeTemp(t, t.TempDir(), "x", "not a binary", 0o755)}); err == nil {
		t.Error("an SBOM of a file that is no Go binary")
	}
}

func TestDependencyReplacements(t *testing.T) {
	var got []string
	module := func(path, version, sum, _ string) string {
		got = append(got, path+"@"+version+" "+sum)
		return path
	}
	ours := func(path string) string { got = append(got, path+" ours"); return path }
	dependency(&debug.Module{Path: "a", Version: "v1", Sum: "h1:x"}, ours, module)
	dependency(&debug.Module{Path: "b", Version: "v0.0.0", Replace: &debug.Module{Path: "../.."}}, ours, module)
	dependency(&debug.Module{Path: "c", Version: "v2", Replace: &debug.Module{Path: "c", Version: "v1", Sum: "h1:y"}}, ours, module)
	dependency(&debug.Module{Path: "d", Version: "v2", Replace: &debug.Module{Path: "fork/d", Version: "v3", Sum: "h1:z"}}, ours, module)
	want := []string{"a@v1 h1:x", "b ours", "c@v1 h1:y", "fork/d@v3 h1:z"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestRunRefusesBadArguments(t *testing.T) {
	for _, args := range [][]string{nil, {"nope"}, {"archive"}, {"archive", "-out", "x"}, {"krew", "-out", "x", "a"}, {"sbom", "-out", "x", "-version", "1", "-namespace", "n", "-created", "yesterday", "b"}} {
		var out bytes.Buffer
		if err := run(args, &out); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

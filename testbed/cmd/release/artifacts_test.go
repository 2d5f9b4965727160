//go:build dist

package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/yaml"
)

// The artifacts tests open what testbed/hack/release.sh wrote into RELEASE_DIR (`make
// release-check` builds a snapshot of linux/amd64 and runs them; `make release` output can be
// checked the same way) as a user, krew, helm and a registry client would.

const repoRoot = "../../.."

type release struct {
	dir, version string
	files        []string // the directory's files, SHA256SUMS too
}

func openRelease(t *testing.T) release {
	t.Helper()
	dir := os.Getenv("RELEASE_DIR")
	if dir == "" {
		t.Fatal("RELEASE_DIR is not set: run `make release-check` (it builds a snapshot release first)")
	}
	raw, err := os.ReadFile(filepath.Join(repoRoot, "builder-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Dist struct{ Version string } `json:"dist"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil || cfg.Dist.Version == "" {
		t.Fatalf("builder-config.yaml dist.version: %v", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := release{dir: dir, version: cfg.Dist.Version}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			t.Errorf("%s in the release is not a file", e.Name())
			continue
		}
		r.files = append(r.files, e.Name())
	}
	return r
}

// matching are the release's files named prefix<os>_<arch>.tar.gz, by "os/arch".
func (r release) matching(prefix string) map[string]string {
	m := map[string]string{}
	for _, f := range r.files {
		if rest, ok := strings.CutPrefix(f, prefix+r.version+"_"); ok && strings.HasSuffix(rest, ".tar.gz") {
			m[strings.Replace(strings.TrimSuffix(rest, ".tar.gz"), "_", "/", 1)] = filepath.Join(r.dir, f)
		}
	}
	return m
}

// untarFiles reads the regular files of a (gzipped, if gz) tar stream.
func untarFiles(t *testing.T, r io.Reader, gz bool) map[string][]byte {
	t.Helper()
	if gz {
		zr, err := gzip.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[path.Clean(h.Name)] = b
	}
}

// archiveCache holds the archives read so far: the tests read the collector's several times.
var archiveCache sync.Map

func openArchive(t *testing.T, p string) map[string][]byte {
	t.Helper()
	if files, ok := archiveCache.Load(p); ok {
		return files.(map[string][]byte)
	}
	files := readArchive(t, p)
	archiveCache.Store(p, files)
	return files
}

func readArchive(t *testing.T, p string) map[string][]byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return untarFiles(t, f, strings.HasSuffix(p, "gz"))
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// extract writes a binary of an archive to a file of its own and returns its path.
func extract(t *testing.T, body []byte, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, body, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func host() string { return runtime.GOOS + "/" + runtime.GOARCH }

func TestSHA256SUMS(t *testing.T) {
	r := openRelease(t)
	raw, err := os.ReadFile(filepath.Join(r.dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for sc := bufio.NewScanner(bytes.NewReader(raw)); sc.Scan(); {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q is not sha256sum's", sc.Text())
		}
		listed[name] = true
		body, err := os.ReadFile(filepath.Join(r.dir, name))
		if err != nil {
			t.Errorf("SHA256SUMS lists %s: %v", name, err)
			continue
		}
		if sha(body) != sum {
			t.Errorf("%s: sha256 %s, SHA256SUMS says %s", name, sha(body), sum)
		}
	}
	want := slices.DeleteFunc(slices.Clone(r.files), func(f string) bool { return f == "SHA256SUMS" })
	if got := slices.Sorted(maps.Keys(listed)); !slices.Equal(got, want) {
		t.Errorf("SHA256SUMS lists %q, the release holds %q", got, want)
	}
	for _, f := range []string{"trail.yaml", "sbom.spdx.json", "kubetrail-" + r.version + ".tgz"} {
		if !listed[f] {
			t.Errorf("the release has no %s", f)
		}
	}
}

// TestCLIArchives: each CLI archive holds kubectl-trail (and the LICENSE, when the repository
// has one); the host's runs, and says the release's version and this commit.
func TestCLIArchives(t *testing.T) {
	r := openRelease(t)
	archives := r.matching("kubectl-trail_v")
	if archives[host()] == "" {
		t.Fatalf("no CLI archive for %s among %v", host(), r.files)
	}
	_, licenseErr := os.Stat(filepath.Join(repoRoot, "LICENSE"))
	for platform, a := range archives {
		files := openArchive(t, a)
		want := []string{"kubectl-trail"}
		if licenseErr == nil {
			want = append(want, "LICENSE")
		}
		if got := slices.Sorted(maps.Keys(files)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
			t.Errorf("%s holds %q, want %q", a, got, want)
		}
		if platform != host() {
			continue
		}
		bin := extract(t, files["kubectl-trail"], "kubectl-trail")
		out, err := exec.Command(bin, "version", "-o", "json").Output()
		if err != nil {
			t.Fatalf("kubectl-trail version -o json: %v", err)
		}
		var v versionJSON
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatal(err)
		}
		head, err := exec.Command("git", "rev-parse", "HEAD").Output()
		if err != nil {
			t.Fatal(err)
		}
		if v.Version != r.version || v.Commit != strings.TrimSpace(string(head)) || v.Platform != platform {
			t.Errorf("kubectl-trail version -o json: %s; want version %s, commit %s, platform %s", out, r.version, head, platform)
		}
		if out, err := exec.Command(bin, "--version").Output(); err != nil || !strings.HasPrefix(string(out), "kubectl trail version "+r.version+"\n") {
			t.Errorf("kubectl-trail --version: %v %q", err, out)
		}
	}
}

type versionJSON struct{ Version, Commit, BuildDate, Platform string }

// collectors are the collector archives' binaries, by platform.
func collectors(t *testing.T, r release) map[string][]byte {
	t.Helper()
	bins := map[string][]byte{}
	for platform, a := range r.matching("otelcol-kubetrail_v") {
		files := openArchive(t, a)
		if files["otelcol-kubetrail"] == nil {
			t.Fatalf("%s has no otelcol-kubetrail: %q", a, slices.Sorted(maps.Keys(files)))
		}
		bins[platform] = files["otelcol-kubetrail"]
	}
	if bins["linux/"+runtime.GOARCH] == nil {
		t.Fatalf("no collector archive for linux/%s among %v", runtime.GOARCH, r.files)
	}
	return bins
}

func TestCollectorArchive(t *testing.T) {
	r := openRelease(t)
	bin := extract(t, collectors(t, r)["linux/"+runtime.GOARCH], "otelcol-kubetrail")
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "otelcol-kubetrail version "+r.version {
		t.Errorf("otelcol-kubetrail --version: %v %q, want version %s", err, out, r.version)
	}
}

// TestKrewManifest: trail.yaml reads as a krew Plugin, lists every CLI archive with its URI,
// sha256 and files, and nothing else.
func TestKrewManifestOfTheRelease(t *testing.T) {
	r := openRelease(t)
	raw, err := os.ReadFile(filepath.Join(r.dir, "trail.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var p KrewPlugin
	if err := yaml.UnmarshalStrict(raw, &p); err != nil {
		t.Fatalf("trail.yaml: %v", err)
	}
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" || p.Metadata.Name != "trail" || p.Spec.Version != "v"+r.version {
		t.Errorf("trail.yaml: %s %s %s %s", p.APIVersion, p.Kind, p.Metadata.Name, p.Spec.Version)
	}
	archives := r.matching("kubectl-trail_v")
	seen := map[string]bool{}
	for _, pl := range p.Spec.Platforms {
		platform := pl.Selector.MatchLabels["os"] + "/" + pl.Selector.MatchLabels["arch"]
		seen[platform] = true
		a := archives[platform]
		if a == "" {
			t.Errorf("trail.yaml lists %s, the release has no archive for it", platform)
			continue
		}
		body, _ := os.ReadFile(a)
		if pl.SHA256 != sha(body) || !strings.HasSuffix(pl.URI, "/"+filepath.Base(a)) || !strings.HasPrefix(pl.URI, "https://") || pl.Bin != "kubectl-trail" {
			t.Errorf("trail.yaml %s: uri %s sha256 %s bin %s; the archive %s has sha256 %s", platform, pl.URI, pl.SHA256, pl.Bin, a, sha(body))
		}
		files := openArchive(t, a)
		for _, op := range pl.Files {
			if files[op.From] == nil || op.To != "." {
				t.Errorf("trail.yaml %s copies %s to %s; the archive holds %q", platform, op.From, op.To, slices.Sorted(maps.Keys(files)))
			}
		}
	}
	if got, want := slices.Sorted(maps.Keys(seen)), slices.Sorted(maps.Keys(archives)); !slices.Equal(got, want) {
		t.Errorf("trail.yaml lists %q, the CLI archives are of %q", got, want)
	}
}

// TestSBOMOfTheRelease: sbom.spdx.json is SPDX 2.3 JSON; it lists kubetrail, and every module
// `go version -m` reads in the host's collector and CLI at the version it reads, and each
// binary with its sha256.
func TestSBOMOfTheRelease(t *testing.T) {
	r := openRelease(t)
	raw, err := os.ReadFile(filepath.Join(r.dir, "sbom.spdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc spdxDocument
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("sbom.spdx.json: %v", err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.DataLicense != "CC0-1.0" || doc.SPDXID != "SPDXRef-DOCUMENT" || !strings.HasPrefix(doc.DocumentNamespace, "https://") {
		t.Errorf("document head: %s %s %s %s", doc.SPDXVersion, doc.DataLicense, doc.SPDXID, doc.DocumentNamespace)
	}
	versions := map[string][]string{} // module → versions listed
	binaries := map[string]bool{}     // sha256 of each binary listed
	for _, p := range doc.Packages {
		if p.PrimaryPackagePurpose == "APPLICATION" {
			for _, c := range p.Checksums {
				binaries[c.ChecksumValue] = true
			}
			continue
		}
		versions[p.Name] = append(versions[p.Name], p.VersionInfo)
	}
	if !slices.Contains(versions["github.com/kubetrail/kubetrail"], r.version) {
		t.Errorf("the SBOM lists github.com/kubetrail/kubetrail at %q, want %s", versions["github.com/kubetrail/kubetrail"], r.version)
	}
	cli := openArchive(t, r.matching("kubectl-trail_v")[host()])["kubectl-trail"]
	for name, body := range map[string][]byte{"otelcol-kubetrail": collectors(t, r)["linux/"+runtime.GOARCH], "kubectl-trail": cli} {
		if !binaries[sha(body)] {
			t.Errorf("the SBOM lists no binary with the sha256 of %s", name)
		}
		deps := goVersionM(t, extract(t, body, name))
		if name == "otelcol-kubetrail" && deps["go.opentelemetry.io/collector/otelcol"] == "" {
			t.Errorf("go version -m reads no go.opentelemetry.io/collector/otelcol in the collector: %v", deps)
		}
		for mod, v := range deps {
			if !slices.Contains(versions[mod], v) {
				t.Errorf("%s holds %s %s; the SBOM lists it at %q", name, mod, v, versions[mod])
			}
		}
	}
}

// goVersionM is `go version -m`'s dependencies of a binary: module → version, the replacement's
// where a replacement with a version was used.
func goVersionM(t *testing.T, bin string) map[string]string {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m %s: %v", bin, err)
	}
	deps := map[string]string{}
	last := ""
	for line := range strings.SplitSeq(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "dep":
			last, deps[f[1]] = f[1], f[2]
		case len(f) >= 2 && f[0] == "=>" && last != "":
			if f[1] == last && len(f) >= 3 && !strings.HasPrefix(f[2], "h1:") {
				deps[last] = f[2] // the same module at another version
			} else {
				delete(deps, last) // a directory, or another module: TestDependencyReplacements
			}
		}
	}
	if len(deps) < 10 {
		t.Fatalf("go version -m %s reads %d dependencies:\n%s", bin, len(deps), out)
	}
	return deps
}

func TestChartPackage(t *testing.T) {
	r := openRelease(t)
	files := openArchive(t, filepath.Join(r.dir, "kubetrail-"+r.version+".tgz"))
	var chart struct{ Name, Version, AppVersion string }
	if err := yaml.Unmarshal(files["kubetrail/Chart.yaml"], &chart); err != nil || chart.Name != "kubetrail" {
		t.Fatalf("kubetrail/Chart.yaml of the package: %v %+v", err, chart)
	}
	if chart.Version != r.version || chart.AppVersion != r.version {
		t.Errorf("the packaged chart is version %s, appVersion %s; want %s", chart.Version, chart.AppVersion, r.version)
	}
	// What helm install reads: the values, their schema and the templates of the chart's directory.
	templates, err := filepath.Glob(filepath.Join(repoRoot, "distribution", "helm", "kubetrail", "templates", "*"))
	if err != nil || len(templates) == 0 {
		t.Fatalf("the chart's templates: %v", err)
	}
	for _, f := range append([]string{"values.yaml", "values.schema.json"}, templates...) {
		if name := "kubetrail/" + strings.TrimPrefix(f, filepath.Join(repoRoot, "distribution", "helm", "kubetrail")+"/"); files[name] == nil {
			t.Errorf("the chart package has no %s", name)
		}
	}
}

type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Annotations map[string]string `json:"annotations"`
	Platform    *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform"`
}

// TestImageIndex: the image tarball is an OCI layout whose one tag is an image index over the
// linux platforms of the collector archives; the host's image holds the archive's collector and
// CLI.
func TestImageIndex(t *testing.T) {
	r := openRelease(t)
	files := openArchive(t, filepath.Join(r.dir, "otelcol-kubetrail_v"+r.version+"_image.tar"))
	blob := func(d ociDescriptor, v any) []byte {
		hexDigest, ok := strings.CutPrefix(d.Digest, "sha256:")
		b := files["blobs/sha256/"+hexDigest]
		if !ok || b == nil || sha(b) != hexDigest {
			t.Fatalf("blob %s missing or not of its digest", d.Digest)
		}
		if v != nil {
			if err := json.Unmarshal(b, v); err != nil {
				t.Fatal(err)
			}
		}
		return b
	}
	var top struct{ Manifests []ociDescriptor }
	if err := json.Unmarshal(files["index.json"], &top); err != nil || len(top.Manifests) != 1 {
		t.Fatalf("index.json: %v, %d entries", err, len(top.Manifests))
	}
	if top.Manifests[0].MediaType != "application/vnd.oci.image.index.v1+json" || top.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != r.version {
		t.Errorf("index.json's entry %+v: want an image index tagged %s", top.Manifests[0], r.version)
	}
	var index struct{ Manifests []ociDescriptor }
	blob(top.Manifests[0], &index)
	platforms := map[string]ociDescriptor{}
	for _, m := range index.Manifests {
		if m.Platform == nil {
			t.Fatalf("manifest %s has no platform", m.Digest)
		}
		platforms[m.Platform.OS+"/"+m.Platform.Architecture] = m
	}
	bins := collectors(t, r)
	if got, want := slices.Sorted(maps.Keys(platforms)), slices.Sorted(maps.Keys(bins)); !slices.Equal(got, want) {
		t.Errorf("the image index lists %q, the collector archives are of %q", got, want)
	}
	var manifest struct {
		Config ociDescriptor
		Layers []ociDescriptor
	}
	blob(platforms["linux/"+runtime.GOARCH], &manifest)
	var cfg struct {
		Architecture, OS string
		Config           struct{ Labels map[string]string }
	}
	blob(manifest.Config, &cfg)
	if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH || cfg.Config.Labels["org.opencontainers.image.version"] != r.version {
		t.Errorf("the linux/%s image's config: %+v", runtime.GOARCH, cfg)
	}
	if len(manifest.Layers) != 1 {
		t.Fatalf("%d layers", len(manifest.Layers))
	}
	rootfs := untarFiles(t, bytes.NewReader(blob(manifest.Layers[0], nil)), true)
	if sha(rootfs["otelcol-kubetrail"]) != sha(bins["linux/"+runtime.GOARCH]) {
		t.Error("the image's /otelcol-kubetrail is not the collector of the archive")
	}
	// The chart's viewer runs /kubetrail serve from the same image: the CLI of the release.
	cli := openArchive(t, r.matching("kubectl-trail_v")["linux/"+runtime.GOARCH])["kubectl-trail"]
	if cli == nil || sha(rootfs["kubetrail"]) != sha(cli) {
		t.Error("the image's /kubetrail is not the CLI of the linux/" + runtime.GOARCH + " kubectl-trail archive")
	}
}

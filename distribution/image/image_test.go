package main

import (
	"archive/tar"
	"bufio"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// The image tests open the tarball `make image` wrote (IMAGE_TAR, set by `make image-test`) the
// way a container runtime would, and check what a platform team relies on: non-root user,
// entrypoint, labels, the files and their owners, that the binary inside runs and validates the
// config inside, that the Dockerfile describes the same image, and that the build is reproducible.

func imageTar(t *testing.T) string {
	t.Helper()
	p := os.Getenv("IMAGE_TAR")
	if p == "" {
		t.Fatal("IMAGE_TAR is not set: run `make image-test` (it builds the image first)")
	}
	return p
}

// untar extracts a tar stream into dir (regular files and directories only).
func untar(t *testing.T, r io.Reader, dir string) map[string]*tar.Header {
	t.Helper()
	headers := map[string]*tar.Header{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return headers
		}
		if err != nil {
			t.Fatal(err)
		}
		name := path.Clean(h.Name)
		if strings.HasPrefix(name, "../") || path.IsAbs(name) {
			t.Fatalf("tar entry %q escapes the archive", h.Name)
		}
		headers[name] = h
		target := filepath.Join(dir, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o755)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("unexpected tar entry %q of type %c", h.Name, h.Typeflag)
		}
	}
}

// openImage returns the one image of the tarball's OCI layout, its index annotations, and the
// directory the layout was extracted to.
func openImage(t *testing.T) (v1.Image, map[string]string, string) {
	t.Helper()
	f, err := os.Open(imageTar(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	untar(t, f, dir)
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("not an OCI image layout: %v", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("the index lists %d manifests, want 1", len(im.Manifests))
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img, im.Manifests[0].Annotations, dir
}

// releasedName is the image's name as `make image` writes it: the released image's, which the
// Helm chart and distribution/kubernetes/kubetrail.yaml run by default, so a loaded tarball
// (docker load, kind load image-archive) is the image they ask for.
const releasedName = "ghcr.io/kubetrail/otelcol-kubetrail"

func TestImageConfig(t *testing.T) {
	img, annotations, dir := openImage(t)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	version := c.Labels["org.opencontainers.image.version"]
	if version == "" {
		t.Fatalf("no org.opencontainers.image.version label: %v", c.Labels)
	}
	for _, check := range []struct {
		what      string
		got, want any
	}{
		{"user (non-root, the UID the chart's podSecurityContext uses)", c.User, "10001:10001"},
		{"entrypoint", c.Entrypoint, []string{"/otelcol-kubetrail"}},
		{"cmd", c.Cmd, []string{"--config=/etc/otelcol-kubetrail/config.yaml"}},
		{"os", cf.OS, "linux"},
		{"title label", c.Labels["org.opencontainers.image.title"], "otelcol-kubetrail"},
		{"ref name annotation", annotations["org.opencontainers.image.ref.name"], version},
		{"containerd name annotation", annotations["io.containerd.image.name"], releasedName + ":" + version},
	} {
		if !reflect.DeepEqual(check.got, check.want) {
			t.Errorf("%s: %v, want %v", check.what, check.got, check.want)
		}
	}
	if _, err := time.Parse(time.RFC3339, c.Labels["org.opencontainers.image.created"]); err != nil {
		t.Errorf("created label %q: %v", c.Labels["org.opencontainers.image.created"], err)
	}
	if len(c.Labels["org.opencontainers.image.revision"]) != 40 {
		t.Errorf("revision label %q is not a commit", c.Labels["org.opencontainers.image.revision"])
	}

	// docker load reads manifest.json: it must name this image's config and layers.
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var docker []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(raw, &docker); err != nil || len(docker) != 1 {
		t.Fatalf("manifest.json: %v %s", err, raw)
	}
	cfgName, _ := img.ConfigName()
	if docker[0].Config != "blobs/sha256/"+cfgName.Hex || !reflect.DeepEqual(docker[0].RepoTags, []string{releasedName + ":" + version}) {
		t.Errorf("manifest.json %+v does not name config %s and tag %s:%s", docker[0], cfgName, releasedName, version)
	}
	for _, l := range append([]string{docker[0].Config}, docker[0].Layers...) {
		if _, err := os.Stat(filepath.Join(dir, l)); err != nil {
			t.Errorf("manifest.json names a missing blob: %v", err)
		}
	}
}

// extracted is the image's config and its filesystem, extracted into a temporary directory as a
// runtime would, with the tar headers of its entries.
func extracted(t *testing.T) (*v1.ConfigFile, string, map[string]*tar.Header) {
	t.Helper()
	img, _, _ := openImage(t)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	rootfs := t.TempDir()
	rc := mutate.Extract(img)
	defer rc.Close()
	return cf, rootfs, untar(t, rc, rootfs)
}

// TestImageFilesystem: the files, their owners and modes, and the binary inside runs: it prints
// its version and validates the image's default config with the image's environment.
func TestImageFilesystem(t *testing.T) {
	cf, rootfs, files := extracted(t)

	for _, want := range []struct {
		name string
		mode int64
		uid  int
	}{
		{"otelcol-kubetrail", 0o755, 0},
		{"kubetrail", 0o755, 0},
		{"etc/otelcol-kubetrail/config.yaml", 0o644, 0},
		{"etc/ssl/certs/ca-certificates.crt", 0o644, 0},
		{"etc/passwd", 0o644, 0},
		{"var/lib/otelcol-kubetrail", 0o750, 10001},
		{"tmp", 0o1777, 0},
	} {
		h := files[want.name]
		if h == nil {
			t.Errorf("/%s missing", want.name)
			continue
		}
		if h.Mode != want.mode || h.Uid != want.uid {
			t.Errorf("/%s: mode %o uid %d, want %o uid %d", want.name, h.Mode, h.Uid, want.mode, want.uid)
		}
	}
	// Nothing else is the user's: the binary and config cannot be changed by a compromised process.
	for name, h := range files {
		if h.Uid != 0 && name != "var/lib/otelcol-kubetrail" {
			t.Errorf("/%s is owned by uid %d", name, h.Uid)
		}
	}
	if len(files) > 20 {
		t.Errorf("%d entries: the image should hold only the binary, config, certificates and users", len(files))
	}
	pem, err := os.ReadFile(filepath.Join(rootfs, "etc", "ssl", "certs", "ca-certificates.crt"))
	if err != nil || !x509.NewCertPool().AppendCertsFromPEM(pem) {
		t.Errorf("the CA bundle holds no certificate (%v)", err)
	}
	passwd, _ := os.ReadFile(filepath.Join(rootfs, "etc", "passwd"))
	if !strings.Contains(string(passwd), ":10001:10001:") {
		t.Errorf("/etc/passwd has no user 10001:\n%s", passwd)
	}

	bin := filepath.Join(rootfs, "otelcol-kubetrail")
	// The image has no libc and no loader: a binary runs there only if it is static. Here, on
	// the host, a dynamic one would run as well, so this is checked on the ELF itself.
	for _, b := range []string{bin, filepath.Join(rootfs, "kubetrail")} {
		if dynamic, err := dynamicELF(b); err != nil || dynamic != "" {
			t.Errorf("%s is not static (%v%s): it would not start on the empty base", filepath.Base(b), err, dynamic)
		}
	}
	if dynamic, _ := dynamicELF("/bin/sh"); dynamic == "" {
		t.Error("the check sees no loader in the host's /bin/sh either: it cannot tell")
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	version := cf.Config.Labels["org.opencontainers.image.version"]
	if err != nil || !strings.Contains(string(out), version) {
		t.Errorf("otelcol-kubetrail --version: %v, output %q, want the version %s", err, out, version)
	}
	cmd := exec.Command(bin, "validate", "--config", filepath.Join(rootfs, "etc", "otelcol-kubetrail", "config.yaml"))
	cmd.Env = cf.Config.Env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the image's config does not validate with the image's environment: %v\n%s", err, out)
	}
}

// TestImageRunsTheViewer: the image's /kubetrail is the CLI of the image's version, and `serve`
// as the chart's viewer runs it (loopback here; no kubeconfig, no config file, the image's
// environment) answers its probe and serves a page, an error panel for a Jaeger that is not there.
func TestImageRunsTheViewer(t *testing.T) {
	cf, rootfs, _ := extracted(t)
	cli := filepath.Join(rootfs, "kubetrail")
	env := append([]string{"HOME=" + t.TempDir()}, cf.Config.Env...)
	version := exec.Command(cli, "version")
	version.Env = env
	out, err := version.CombinedOutput()
	if want := cf.Config.Labels["org.opencontainers.image.version"]; err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("kubetrail version: %v, output %q, want the version %s", err, out, want)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	serve := exec.Command(cli, "serve", "--listen", addr, "--source", "jaeger=http://127.0.0.1:1", "--cluster", "image-test", "--jaeger-ui", "https://jaeger.example.com")
	serve.Env = env
	var stderr strings.Builder
	serve.Stderr = &stderr
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = serve.Process.Kill(); _ = serve.Wait() }()
	get := func(p string) (int, string, error) {
		resp, err := http.Get("http://" + addr + p)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body, err := get("/healthz")
		if err == nil && code == http.StatusOK && body == "ok\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz: %d %q %v; serve said:\n%s", code, body, err, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	code, body, err := get("/?namespace=shop")
	if err != nil || code != http.StatusBadGateway || !strings.Contains(body, "backend unreachable") {
		t.Errorf("the search page with no Jaeger: %d %v, want 502 and an error panel:\n%s", code, err, body)
	}
}

// dynamicELF says what makes an ELF binary dynamically linked (an interpreter, needed
// libraries), or "" for a static one.
func dynamicELF(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "an interpreter", nil
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil || len(libs) > 0 {
		return fmt.Sprintf("libraries %v", libs), err
	}
	return "", nil
}

// TestImageReproducible: building again from the files inside the image, with its labels' version,
// revision and time, gives the same image digest.
func TestImageReproducible(t *testing.T) {
	img, _, _ := openImage(t)
	cf, rootfs, _ := extracted(t)
	l := cf.Config.Labels
	created, err := time.Parse(time.RFC3339, l["org.opencontainers.image.created"])
	if err != nil {
		t.Fatal(err)
	}
	again, err := build(options{
		binary:  filepath.Join(rootfs, "otelcol-kubetrail"),
		cli:     filepath.Join(rootfs, "kubetrail"),
		config:  filepath.Join(rootfs, "etc", "otelcol-kubetrail", "config.yaml"),
		caCerts: filepath.Join(rootfs, "etc", "ssl", "certs", "ca-certificates.crt"),
		name:    "otelcol-kubetrail", version: l["org.opencontainers.image.version"], revision: l["org.opencontainers.image.revision"],
		arch: cf.Architecture, created: created,
	})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if got, _ := again.Digest(); got != want {
		t.Errorf("rebuilt digest %s, the tarball's %s", got, want)
	}
}

// TestDockerfileDescribesTheSameImage: the Dockerfile's USER, WORKDIR, ENV, EXPOSE, LABEL,
// ENTRYPOINT and CMD say what the built image's config says.
func TestDockerfileDescribesTheSameImage(t *testing.T) {
	img, _, _ := openImage(t)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	f, err := os.Open("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var final []string // directives of the last stage
	sc := bufio.NewScanner(f)
	var cont string
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cont += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		line, cont = cont+line, ""
		if strings.HasPrefix(line, "FROM ") {
			final = nil
		}
		final = append(final, line)
	}
	subst := strings.NewReplacer("${VERSION}", c.Labels["org.opencontainers.image.version"], "${REVISION}", c.Labels["org.opencontainers.image.revision"])
	var env, ports []string
	labels := map[string]string{}
	for _, d := range final {
		verb, arg, _ := strings.Cut(d, " ")
		switch verb {
		case "FROM":
			if arg != "scratch" {
				t.Errorf("final stage FROM %s, want scratch", arg)
			}
		case "USER":
			if arg != c.User {
				t.Errorf("USER %s, image %s", arg, c.User)
			}
		case "WORKDIR":
			if arg != c.WorkingDir {
				t.Errorf("WORKDIR %s, image %s", arg, c.WorkingDir)
			}
		case "ENV":
			env = append(env, arg)
		case "EXPOSE":
			ports = append(ports, arg)
		case "LABEL":
			k, v, _ := strings.Cut(arg, "=")
			labels[k] = subst.Replace(strings.Trim(v, `"`))
		case "ENTRYPOINT", "CMD":
			var list []string
			if err := json.Unmarshal([]byte(arg), &list); err != nil {
				t.Errorf("%s is not in exec form: %s", verb, arg)
			}
			want := c.Entrypoint
			if verb == "CMD" {
				want = c.Cmd
			}
			if !reflect.DeepEqual(list, want) {
				t.Errorf("%s %v, image %v", verb, list, want)
			}
		}
	}
	if !reflect.DeepEqual(env, c.Env) {
		t.Errorf("ENV %v, image %v", env, c.Env)
	}
	var imagePorts []string
	for p := range c.ExposedPorts {
		imagePorts = append(imagePorts, p)
	}
	sort.Strings(ports)
	sort.Strings(imagePorts)
	if !reflect.DeepEqual(ports, imagePorts) {
		t.Errorf("EXPOSE %v, image %v", ports, imagePorts)
	}
	for k, v := range c.Labels {
		if k == "org.opencontainers.image.created" {
			continue // set by the engine at build time
		}
		if labels[k] != v {
			t.Errorf("LABEL %s=%q, image %q", k, labels[k], v)
		}
	}
}

package main

import (
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// TestIndexArchive: several -binary/-arch pairs give an OCI layout whose one entry (the tag) is an
// image index listing one image per architecture, each image's config of that architecture and
// its binary and CLI the ones given for it; the same inputs give the same digest.
func TestIndexArchive(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	base := options{
		config: write("config.yaml", "receivers: {}\n"), caCerts: write("ca.pem", "not checked here\n"),
		name: "otelcol-kubetrail", version: "1.2.3", revision: "0123456789abcdef0123456789abcdef01234567",
		created: time.Unix(1764000000, 0).UTC(),
	}
	amd, arm := base, base
	amd.binary, amd.cli, amd.arch = write("amd64", "amd64 binary"), write("amd64-cli", "amd64 binary CLI"), "amd64"
	arm.binary, arm.cli, arm.arch = write("arm64", "arm64 binary"), write("arm64-cli", "arm64 binary CLI"), "arm64"
	out := filepath.Join(dir, "image.tar")
	digest, err := writeIndexArchive([]options{amd, arm}, out)
	if err != nil {
		t.Fatal(err)
	}

	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	extracted := t.TempDir()
	files := untar(t, f, extracted)
	if _, ok := files["manifest.json"]; ok {
		t.Error("an index archive has a docker manifest.json, which would name one architecture's image only")
	}
	top, err := layout.ImageIndexFromPath(extracted)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].MediaType != types.OCIImageIndex || tm.Manifests[0].Digest != digest {
		t.Fatalf("index.json lists %+v, want the one image index %s", tm.Manifests, digest)
	}
	if got := tm.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; got != "1.2.3" {
		t.Errorf("ref.name annotation %q, want 1.2.3", got)
	}
	idx, err := top.ImageIndex(digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"amd64": "amd64 binary", "arm64": "arm64 binary"}
	if len(im.Manifests) != len(want) {
		t.Fatalf("the image index lists %d manifests, want %d", len(im.Manifests), len(want))
	}
	for _, m := range im.Manifests {
		if m.Platform == nil || m.Platform.OS != "linux" || want[m.Platform.Architecture] == "" {
			t.Errorf("manifest %s has platform %+v", m.Digest, m.Platform)
			continue
		}
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != m.Platform.Architecture || cf.OS != "linux" || cf.Config.Labels["org.opencontainers.image.version"] != "1.2.3" {
			t.Errorf("the %s image's config says %s/%s, labels %v", m.Platform.Architecture, cf.OS, cf.Architecture, cf.Config.Labels)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%d layers (%v)", len(layers), err)
		}
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		rootfs := t.TempDir()
		untar(t, rc, rootfs)
		_ = rc.Close()
		if got, _ := os.ReadFile(filepath.Join(rootfs, "otelcol-kubetrail")); string(got) != want[m.Platform.Architecture] {
			t.Errorf("the %s image holds the binary %q", m.Platform.Architecture, got)
		}
		if got, _ := os.ReadFile(filepath.Join(rootfs, "kubetrail")); string(got) != want[m.Platform.Architecture]+" CLI" {
			t.Errorf("the %s image holds the CLI %q", m.Platform.Architecture, got)
		}
	}

	// What the release workflow's `crane push DIR REF` does with the extracted layout (its one
	// entry an index: pushed as such), against a registry on loopback; a client pulling one
	// platform gets that platform's image.
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref, err := name.ParseReference(strings.TrimPrefix(srv.URL, "http://") + "/kubetrail/otelcol-kubetrail:1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatalf("push: %v", err)
	}
	desc, err := remote.Get(ref)
	if err != nil || desc.Digest != digest || !desc.MediaType.IsIndex() {
		t.Fatalf("the pushed tag: %v %+v, want the index %s", err, desc, digest)
	}
	pulled, err := remote.Image(ref, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "arm64"}))
	if err != nil {
		t.Fatal(err)
	}
	if cf, err := pulled.ConfigFile(); err != nil || cf.Architecture != "arm64" {
		t.Errorf("pulling linux/arm64 gives %v (%v)", cf, err)
	}

	again, err := buildIndex([]options{amd, arm})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := again.Digest(); d != digest {
		t.Errorf("the same inputs give the index digest %s, then %s", digest, d)
	}
	if _, err := buildIndex([]options{amd, amd}); err == nil {
		t.Error("two images of one architecture make an index")
	}
}

// Command image builds the otelcol-kubetrail container image without a container engine: the
// static collector binary, the default config and CA certificates on an empty base, run as a
// non-root user, with the static kubetrail CLI beside it for the chart's viewer (`kubetrail
// serve`, viewer.enabled), written as an OCI image layout in one tar file (`make image`). The Dockerfile next to it
// builds the same image with a container engine.
//
// Given several -binary/-arch pairs (or -index), it writes one image per architecture and an
// image index over them, the multi-arch image of a release (testbed/hack/release.sh,
// docs/releasing.md), which `crane push DIR REF` (the extracted layout) pushes as one tag.
//
// The image is reproducible: every timestamp is -created (the commit time in `make image`), so
// the same inputs give the same digest.
//
// It lives in its own Go module so that go-containerregistry does not become a dependency of
// the collector's module.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed shape; the Dockerfile says the same (image_test.go compares them).
const (
	binaryPath = "/otelcol-kubetrail"
	cliPath    = "/kubetrail"
	configPath = "/etc/otelcol-kubetrail/config.yaml"
	caPath     = "/etc/ssl/certs/ca-certificates.crt"
	stateDir   = "/var/lib/otelcol-kubetrail"
	uid        = 10001
	user       = "10001:10001"
)

// description is the image's org.opencontainers.image.description.
const description = "OpenTelemetry Collector with kubetrail: traces of Kubernetes objects from the audit stream and Events; /kubetrail serve is its viewer"

// env makes the default config (distribution/config.yaml, written for `make run` on loopback)
// listen on the container's interfaces and write its trace file to the state directory.
var env = []string{
	"KUBETRAIL_AUDIT_ENDPOINT=0.0.0.0:9880",
	"KUBETRAIL_HEALTH_ENDPOINT=0.0.0.0:13133",
	"KUBETRAIL_OUT=" + stateDir + "/traces.jsonl",
}

// options are one image's: one collector binary and one CLI of one architecture.
type options struct {
	binary, cli, config, caCerts string
	name, version, revision      string
	arch                         string
	created                      time.Time
}

// list is a flag given once per value.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var o options
	var out string
	var created int64
	var binaries, clis, arches list
	var index bool
	flag.Var(&binaries, "binary", "a static otelcol-kubetrail binary (default bin/otelcol-kubetrail); once per architecture, in -arch's order")
	flag.Var(&clis, "cli", "the static kubetrail CLI of the same architecture (default bin/kubetrail); once per -binary, in its order")
	flag.StringVar(&o.config, "config", "distribution/config.yaml", "the default collector config")
	flag.StringVar(&o.caCerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA certificate bundle (PEM)")
	flag.StringVar(&o.name, "name", "ghcr.io/kubetrail/otelcol-kubetrail", "image name (without tag): the released image's, which the chart and the manifest run by default")
	flag.StringVar(&o.version, "version", "", "image tag and org.opencontainers.image.version (required)")
	flag.StringVar(&o.revision, "revision", "", "org.opencontainers.image.revision (the commit)")
	flag.Var(&arches, "arch", "GOARCH of the -binary at the same position (default amd64)")
	flag.BoolVar(&index, "index", false, "write an image index even for one architecture (several -binary imply it)")
	flag.Int64Var(&created, "created", 0, "creation time, Unix seconds (every timestamp in the image)")
	flag.StringVar(&out, "out", "", "the OCI image layout tar file to write (required)")
	flag.Parse()
	if o.version == "" || out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "image: -version and -out are required, and nothing else")
		os.Exit(2)
	}
	if len(binaries) == 0 {
		binaries = list{"bin/otelcol-kubetrail"}
	}
	if len(clis) == 0 && len(binaries) == 1 {
		clis = list{"bin/kubetrail"}
	}
	if len(clis) != len(binaries) {
		fmt.Fprintf(os.Stderr, "image: %d -binary and %d -cli: give one -cli for each -binary\n", len(binaries), len(clis))
		os.Exit(2)
	}
	if len(arches) == 0 && len(binaries) == 1 {
		arches = list{"amd64"}
	}
	if len(arches) != len(binaries) {
		fmt.Fprintf(os.Stderr, "image: %d -binary and %d -arch: give one -arch for each -binary\n", len(binaries), len(arches))
		os.Exit(2)
	}
	o.created = time.Unix(created, 0).UTC()
	var images []options
	for i, b := range binaries {
		one := o
		one.binary, one.cli, one.arch = b, clis[i], arches[i]
		images = append(images, one)
	}
	var digest v1.Hash
	var err error
	if index || len(images) > 1 {
		digest, err = writeIndexArchive(images, out)
	} else {
		var img v1.Image
		if img, err = build(images[0]); err == nil {
			if err = writeArchive(img, images[0], out); err == nil {
				digest, err = img.Digest()
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("%s:%s %s (%s) → %s\n", o.name, o.version, digest, strings.Join(arches, ", "), out)
}

// labels are the OCI annotations the image config carries.
func labels(o options) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       "otelcol-kubetrail",
		"org.opencontainers.image.description": description,
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.created":     o.created.Format(time.RFC3339),
		"org.opencontainers.image.base.name":   "scratch",
	}
	if o.revision != "" {
		l["org.opencontainers.image.revision"] = o.revision
	}
	return l
}

// build assembles the image: one layer on an empty base, OCI media types.
func build(o options) (v1.Image, error) {
	rootfs, err := rootfsTar(o)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(rootfs)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression))
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = o.arch, "linux"
	cf.Created = v1.Time{Time: o.created}
	cf.Author = "kubetrail"
	cf.History = []v1.History{{Created: v1.Time{Time: o.created}, CreatedBy: "distribution/image (make image)", Comment: "otelcol-kubetrail " + o.version}}
	cf.Config = v1.Config{
		User:         user,
		Entrypoint:   []string{binaryPath},
		Cmd:          []string{"--config=" + configPath},
		Env:          env,
		WorkingDir:   stateDir,
		ExposedPorts: map[string]struct{}{"9880/tcp": {}, "13133/tcp": {}},
		Labels:       labels(o),
	}
	return mutate.ConfigFile(img, cf)
}

// rootfsTar is the layer's content: files owned by root and not writable by the image's user,
// except the state directory and /tmp.
func rootfsTar(o options) ([]byte, error) {
	read := func(p string) ([]byte, error) {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		if len(b) == 0 {
			return nil, fmt.Errorf("%s is empty", p)
		}
		return b, nil
	}
	bin, err := read(o.binary)
	if err != nil {
		return nil, err
	}
	cli, err := read(o.cli)
	if err != nil {
		return nil, err
	}
	cfg, err := read(o.config)
	if err != nil {
		return nil, err
	}
	ca, err := read(o.caCerts)
	if err != nil {
		return nil, err
	}
	passwd := "root:x:0:0:root:/root:/sbin/nologin\notelcol:x:10001:10001:otelcol-kubetrail:" + stateDir + ":/sbin/nologin\n"
	group := "root:x:0:\notelcol:x:10001:\n"

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, mode int64, owner int, body []byte, dir bool) error {
		h := &tar.Header{Name: name, Mode: mode, Uid: owner, Gid: owner, ModTime: o.created, Format: tar.FormatPAX}
		if dir {
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	for _, e := range []struct {
		name  string
		mode  int64
		owner int
		body  []byte
		dir   bool
	}{
		{"etc", 0o755, 0, nil, true},
		{"etc/passwd", 0o644, 0, []byte(passwd), false},
		{"etc/group", 0o644, 0, []byte(group), false},
		{"etc/otelcol-kubetrail", 0o755, 0, nil, true},
		{"etc/otelcol-kubetrail/config.yaml", 0o644, 0, cfg, false},
		{"etc/ssl", 0o755, 0, nil, true},
		{"etc/ssl/certs", 0o755, 0, nil, true},
		{"etc/ssl/certs/ca-certificates.crt", 0o644, 0, ca, false},
		{"kubetrail", 0o755, 0, cli, false},
		{"otelcol-kubetrail", 0o755, 0, bin, false},
		{"tmp", 0o1777, 0, nil, true},
		{"var", 0o755, 0, nil, true},
		{"var/lib", 0o755, 0, nil, true},
		{"var/lib/otelcol-kubetrail", 0o750, uid, nil, true},
	} {
		if err := add(e.name, e.mode, e.owner, e.body, e.dir); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeArchive writes the image as an OCI image layout (index.json, oci-layout, blobs/) in one
// tar file, plus the manifest.json `docker load` reads, so that podman, containerd (ctr import),
// skopeo (oci-archive:) and Docker all load it.
func writeArchive(img v1.Image, o options, out string) error {
	dir, err := os.MkdirTemp("", "kubetrail-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	ref := o.name + ":" + o.version
	if err := p.AppendImage(img, layout.WithAnnotations(refAnnotations(o))); err != nil {
		return err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	docker := []map[string]any{{"Config": "blobs/sha256/" + cfgName.Hex, "RepoTags": []string{ref}, "Layers": []string{}}}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		docker[0]["Layers"] = append(docker[0]["Layers"].([]string), "blobs/sha256/"+d.Hex)
	}
	mj, err := json.Marshal(docker)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), mj, 0o644); err != nil {
		return err
	}
	return tarDir(dir, out, o.created)
}

// refAnnotations name the tag in the layout's index.json.
func refAnnotations(o options) map[string]string {
	return map[string]string{
		"org.opencontainers.image.ref.name": o.version,
		"io.containerd.image.name":          o.name + ":" + o.version,
	}
}

// buildIndex builds one image for each of images (one architecture each) and the image index
// over them, each manifest with its platform.
func buildIndex(images []options) (v1.ImageIndex, error) {
	seen := map[string]bool{}
	var adds []mutate.IndexAddendum
	for _, o := range images {
		if seen[o.arch] {
			return nil, fmt.Errorf("architecture %s given twice", o.arch)
		}
		seen[o.arch] = true
		img, err := build(o)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", o.binary, o.arch, err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "linux", Architecture: o.arch},
		}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	return mutate.Annotations(idx, map[string]string{
		"org.opencontainers.image.version": images[0].version,
		"org.opencontainers.image.created": images[0].created.Format(time.RFC3339),
	}).(v1.ImageIndex), nil
}

// writeIndexArchive writes the multi-architecture image as an OCI image layout in one tar file:
// index.json names one image index (the tag), which lists one image manifest per architecture.
// `docker load` takes one image, not an index, so there is no manifest.json: push it with
// `crane push DIR REF` (DIR the extracted tar), or copy it with skopeo (oci-archive:).
func writeIndexArchive(images []options, out string) (v1.Hash, error) {
	idx, err := buildIndex(images)
	if err != nil {
		return v1.Hash{}, err
	}
	dir, err := os.MkdirTemp("", "kubetrail-image-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(refAnnotations(images[0]))); err != nil {
		return v1.Hash{}, err
	}
	if err := tarDir(dir, out, images[0].created); err != nil {
		return v1.Hash{}, err
	}
	return idx.Digest()
}

// tarDir archives dir's files in name order with fixed times, atomically replacing out.
func tarDir(dir, out string, mtime time.Time) error {
	var names []string
	if err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, err := filepath.Rel(dir, path)
			names = append(names, rel)
			return err
		}
		return nil
	}); err != nil {
		return err
	}
	sort.Strings(names)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp := out + ".tmp." + strconv.Itoa(os.Getpid())
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	for _, n := range names {
		body, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(n), Mode: 0o644, Size: int64(len(body)), ModTime: mtime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := tw.Write(body); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

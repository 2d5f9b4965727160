package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// writeArchive writes files into a .tar.gz, each at the archive's top under its own base name, in
// the order given: owned by root, mode 0755 for executables and 0644 for the rest, every time
// mtime, the gzip header without name or time, so the same files give the same bytes.
func writeArchive(out string, mtime time.Time, files []string) error {
	var buf bytes.Buffer
	// The default level: best compression costs seconds per collector for a few percent.
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	seen := map[string]bool{}
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		st, err := os.Stat(f)
		if err != nil {
			return err
		}
		name := filepath.Base(f)
		if seen[name] {
			return fmt.Errorf("archive: two files named %s", name)
		}
		seen[name] = true
		mode := int64(0o644)
		if st.Mode()&0o111 != 0 {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(body)), ModTime: mtime,
			Typeflag: tar.TypeReg, Uname: "root", Gname: "root", Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := tw.Write(body); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return writeFile(out, buf.Bytes())
}

// archiveFiles lists the regular files of a .tar.gz.
func archiveFiles(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if h.Typeflag == tar.TypeReg {
			names = append(names, h.Name)
		}
	}
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// KrewPlugin is krew's plugin manifest (krew.googlecontainertools.github.com/v1alpha2 Plugin),
// the fields this release fills.
type KrewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec KrewSpec `json:"spec"`
}

// KrewSpec is the manifest's spec.
type KrewSpec struct {
	Version          string         `json:"version"`
	Homepage         string         `json:"homepage"`
	ShortDescription string         `json:"shortDescription"`
	Description      string         `json:"description"`
	Platforms        []KrewPlatform `json:"platforms"`
}

// KrewPlatform is one archive of the plugin and the os/arch it is for.
type KrewPlatform struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	URI    string       `json:"uri"`
	SHA256 string       `json:"sha256"`
	Files  []KrewFileOp `json:"files"`
	Bin    string       `json:"bin"`
}

// KrewFileOp copies a file of the archive into the plugin's directory.
type KrewFileOp struct {
	From string `json:"from"`
	To   string `json:"to"`
}

const (
	krewAPIVersion = "krew.googlecontainertools.github.com/v1alpha2"
	pluginBinary   = "kubectl-trail"
	homepage       = "https://github.com/kubetrail/kubetrail"
)

// cliArchiveName is the name release.sh gives the CLI's archive of one platform.
var cliArchiveName = regexp.MustCompile(`^kubectl-trail_v([^_]+)_([a-z0-9]+)_([a-z0-9]+)\.tar\.gz$`)

// krewManifest is the plugin "trail" over the CLI's archives, each downloaded from url/<name>:
// its platform from its name, its sha256 and file list from its bytes.
func krewManifest(version, url string, archives []string) (KrewPlugin, error) {
	p := KrewPlugin{APIVersion: krewAPIVersion, Kind: "Plugin"}
	p.Metadata.Name = "trail"
	p.Spec = KrewSpec{
		Version:          "v" + version,
		Homepage:         homepage,
		ShortDescription: "Show a Kubernetes object's whole story from its traces",
		Description: "kubectl trail reads the traces of Kubernetes objects that the kubetrail OpenTelemetry Collector\n" +
			"components write (from Jaeger or a file) and prints one object's whole story: its writes, who\n" +
			"made them, its events and its children, as a tree, a timeline, JSON or an HTML page. It also\n" +
			"starts a trace before a change (kubectl trail annotate) and applies objects inside a trace\n" +
			"(kubectl trail apply --wait).\n",
	}
	seen := map[string]bool{}
	for _, a := range archives {
		m := cliArchiveName.FindStringSubmatch(filepath.Base(a))
		if m == nil {
			return p, fmt.Errorf("krew: %s is not named kubectl-trail_v<version>_<os>_<arch>.tar.gz", a)
		}
		if m[1] != version {
			return p, fmt.Errorf("krew: %s is of version %s, not %s", a, m[1], version)
		}
		platform := m[2] + "/" + m[3]
		if seen[platform] {
			return p, fmt.Errorf("krew: two archives for %s", platform)
		}
		seen[platform] = true
		sum, err := fileSHA256(a)
		if err != nil {
			return p, err
		}
		files, err := archiveFiles(a)
		if err != nil {
			return p, err
		}
		var pl KrewPlatform
		pl.Selector.MatchLabels = map[string]string{"os": m[2], "arch": m[3]}
		pl.URI = strings.TrimSuffix(url, "/") + "/" + filepath.Base(a)
		pl.SHA256 = sum
		pl.Bin = pluginBinary
		hasBin := false
		for _, f := range files {
			pl.Files = append(pl.Files, KrewFileOp{From: f, To: "."})
			hasBin = hasBin || f == pluginBinary
		}
		if !hasBin {
			return p, fmt.Errorf("krew: %s has no %s", a, pluginBinary)
		}
		p.Spec.Platforms = append(p.Spec.Platforms, pl)
	}
	return p, nil
}

func writeYAML(path string, v any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	return writeFile(path, b)
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(path, append(b, '\n'))
}

// writeFile replaces path atomically.
func writeFile(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

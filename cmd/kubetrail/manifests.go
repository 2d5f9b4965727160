package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// manifest is one object read from -f, with where it was read, for messages.
type manifest struct {
	obj   *unstructured.Unstructured
	where string // "deploy.yaml, document 2", "stdin, document 1, item 3"
}

// manifestExts are the files of a directory that apply reads, as kubectl reads them.
var manifestExts = []string{".yaml", ".yml", ".json"}

// readManifests reads the objects of the -f values, in order: a file, a directory's .yaml, .yml
// and .json files (by name, not its subdirectories), or - for stdin. A file holds YAML documents
// (separated by ---) or JSON objects; a List (kind List, or any *List with items) stands for its
// items.
func readManifests(paths []string, stdin io.Reader) ([]manifest, error) {
	var out []manifest
	readStdin := false
	for _, p := range paths {
		if p == "-" {
			if readStdin {
				return nil, errors.New("-f -: stdin can be read only once")
			}
			readStdin = true
			m, err := decodeManifests(stdin, "stdin")
			if err != nil {
				return nil, err
			}
			out = append(out, m...)
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("-f: %w", err)
		}
		files := []string{p}
		if fi.IsDir() {
			entries, err := os.ReadDir(p)
			if err != nil {
				return nil, fmt.Errorf("-f: %w", err)
			}
			files = files[:0]
			for _, e := range entries { // by name
				if !e.IsDir() && isManifest(e.Name()) {
					files = append(files, filepath.Join(p, e.Name()))
				}
			}
			if len(files) == 0 {
				return nil, fmt.Errorf("-f %s: the directory holds no .yaml, .yml or .json file (subdirectories are not read)", p)
			}
		}
		for _, name := range files {
			f, err := os.Open(name)
			if err != nil {
				return nil, fmt.Errorf("-f: %w", err)
			}
			m, err := decodeManifests(f, name)
			f.Close()
			if err != nil {
				return nil, err
			}
			out = append(out, m...)
		}
	}
	return out, nil
}

func isManifest(name string) bool {
	for _, ext := range manifestExts {
		if strings.HasSuffix(strings.ToLower(name), ext) {
			return true
		}
	}
	return false
}

// decodeManifests reads the documents of one file; name is the file's, for messages.
func decodeManifests(r io.Reader, name string) ([]manifest, error) {
	var out []manifest
	d := yaml.NewYAMLOrJSONDecoder(r, 4096)
	for doc := 1; ; doc++ {
		var raw json.RawMessage
		err := d.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		where := fmt.Sprintf("%s, document %d", name, doc)
		if err != nil {
			return nil, fmt.Errorf("%s: not YAML or JSON: %w", where, err)
		}
		if t := bytes.TrimSpace(raw); len(t) == 0 || bytes.Equal(t, []byte("null")) {
			continue // an empty document: a leading ---, a comment
		}
		obj, _, err := unstructured.UnstructuredJSONScheme.Decode(raw, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: not a Kubernetes object: %w", where, err)
		}
		switch o := obj.(type) {
		case *unstructured.Unstructured:
			if err := checkManifest(o); err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			out = append(out, manifest{obj: o, where: where})
		case *unstructured.UnstructuredList:
			for i := range o.Items {
				item := &o.Items[i]
				w := fmt.Sprintf("%s, item %d", where, i+1)
				if err := checkManifest(item); err != nil {
					return nil, fmt.Errorf("%s: %w", w, err)
				}
				out = append(out, manifest{obj: item, where: w})
			}
		}
	}
}

// checkManifest refuses what server-side apply cannot take.
func checkManifest(o *unstructured.Unstructured) error {
	switch {
	case o.GetAPIVersion() == "" || o.GetKind() == "":
		return errors.New("an object needs apiVersion and kind")
	case o.GetName() == "":
		if o.GetGenerateName() != "" {
			return fmt.Errorf("%s has generateName %q and no name: server-side apply needs metadata.name", o.GetKind(), o.GetGenerateName())
		}
		return fmt.Errorf("%s has no metadata.name", o.GetKind())
	}
	return nil
}

package main

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"unicode"
)

// A Binary is one shipped executable: Name says what it is in the report, File where it is.
type Binary struct{ Name, File string }

// A Module is one module version linked into one or more binaries, with what its licence and
// notice files say. Path and Version are what was linked: a replaced module's replacement.
type Module struct {
	Path, Version string
	In            []string // the names of the binaries that link it, in the order given
	Licences      []string // sorted; [Unknown] when a file matched no rule, empty when there is no file
	LicenceFiles  []File   // the module's own, or those of the module holding it (see inherited)
	NoticeFiles   []File
	// Inherited names the module whose licence files cover this one when it ships none of its
	// own (a nested module of a repository whose licence sits at the repository's root).
	Inherited string
}

// A File is a licence or notice file: Ref is how the report names it (module@version/name),
// Text its content.
type File struct{ Ref, Text string }

// Expression is the module's licence as the report and the allowlist write it.
func (m *Module) Expression() string {
	if len(m.Licences) == 0 {
		return "none found"
	}
	return strings.Join(m.Licences, " AND ")
}

// stdPath names the Go standard library, which every binary links, in the report.
const stdPath = "std"

var (
	licenceName = regexp.MustCompile(`(?i)^(licen[cs]e|copying|unlicense)([-._].*)?$`)
	noticeName  = regexp.MustCompile(`(?i)^notice([-._].*)?$`)
)

// goEnv reads one `go env` variable: the module cache and GOROOT are where the toolchain that
// built the binaries keeps the sources they were built from.
func goEnv(name string) (string, error) {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Linked reads the module list each binary's build information records (what `go version -m`
// prints) and finds each module's licence and notice files in the module cache. The binaries'
// own modules (the main modules, and modules replaced by a local directory, which is this
// repository) are kubetrail's and are left out; the standard library is listed once as "std".
func Linked(bins []Binary) ([]*Module, error) {
	modCache, err := goEnv("GOMODCACHE")
	if err != nil {
		return nil, err
	}
	goroot, err := goEnv("GOROOT")
	if err != nil {
		return nil, err
	}
	byKey := map[string]*Module{}
	var mods []*Module
	add := func(p, v, bin string) *Module {
		k := p + "@" + v
		m := byKey[k]
		if m == nil {
			m = &Module{Path: p, Version: v}
			byKey[k] = m
			mods = append(mods, m)
		}
		if !slices.Contains(m.In, bin) {
			m.In = append(m.In, bin)
		}
		return m
	}
	for _, b := range bins {
		info, err := buildinfo.ReadFile(b.File)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", b.Name, b.File, err)
		}
		add(stdPath, "", b.Name)
		for _, d := range info.Deps {
			d, ok, err := linkedVersion(d)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", b.Name, err)
			}
			if !ok {
				continue
			}
			add(d.Path, d.Version, b.Name)
		}
	}

	for _, m := range mods {
		dir, ref := goroot, "GOROOT"
		if m.Path != stdPath {
			if dir, err = moduleDir(modCache, m.Path, m.Version); err != nil {
				return nil, err
			}
			ref = m.Path + "@" + m.Version
		}
		if m.LicenceFiles, err = readFiles(dir, ref, licenceName); err != nil {
			return nil, err
		}
		if m.NoticeFiles, err = readFiles(dir, ref, noticeName); err != nil {
			return nil, err
		}
	}
	inherit(mods)
	for _, m := range mods {
		m.classify()
	}
	slices.SortFunc(mods, func(a, b *Module) int {
		if a.Path == stdPath || b.Path == stdPath {
			return boolCmp(a.Path != stdPath, b.Path != stdPath)
		}
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Version, b.Version)
	})
	return mods, nil
}

// linkedVersion is the module version a dependency line of a binary's build information links:
// the replacement's, when it has one. ok is false for a module replaced by a directory on disk
// (version "(devel)" or none), which is this repository: ocb's manifest replaces
// github.com/kubetrail/kubetrail with "../..".
func linkedVersion(d *debug.Module) (linked *debug.Module, ok bool, err error) {
	if d.Replace != nil {
		d = d.Replace
	}
	if strings.HasPrefix(d.Path, ".") || filepath.IsAbs(d.Path) {
		return nil, false, nil
	}
	if d.Version == "" || d.Version == "(devel)" {
		return nil, false, fmt.Errorf("module %s has no version", d.Path)
	}
	return d, true, nil
}

// inherit gives a nested module without a licence file of its own the licence files of the
// linked module whose path holds it (a module of the same repository, whose licence sits at the
// repository's root).
func inherit(mods []*Module) {
	for _, m := range mods {
		if len(m.LicenceFiles) > 0 {
			continue
		}
		var holder *Module
		for _, o := range mods {
			if len(o.LicenceFiles) > 0 && o.Inherited == "" && strings.HasPrefix(m.Path, o.Path+"/") &&
				(holder == nil || len(o.Path) > len(holder.Path)) {
				holder = o
			}
		}
		if holder != nil {
			m.LicenceFiles, m.Inherited = holder.LicenceFiles, holder.Path+"@"+holder.Version
		}
	}
}

// classify sets Licences from the licence files. An unrecognised file stays in the expression
// even beside recognised ones: it may be the licence of code the others do not cover.
func (m *Module) classify() {
	m.Licences = nil
	for _, f := range m.LicenceFiles {
		m.Licences = append(m.Licences, Classify(f.Text)...)
	}
	slices.Sort(m.Licences)
	m.Licences = slices.Compact(m.Licences)
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// moduleDir is where the module cache holds path@version, downloading it (from the proxy the
// build used) if the cache has been trimmed since.
func moduleDir(modCache, p, v string) (string, error) {
	dir := filepath.Join(modCache, filepath.FromSlash(escape(p)+"@"+escape(v)))
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		return dir, nil
	}
	var stderr bytes.Buffer
	cmd := exec.Command("go", "mod", "download", "-json", p+"@"+v)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var dl struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &dl); jerr == nil && dl.Error != "" {
		err = errors.New(dl.Error)
	}
	if err != nil || dl.Dir == "" {
		return "", fmt.Errorf("module %s@%s is not in the module cache and go mod download failed: %v %s", p, v, err, strings.TrimSpace(stderr.String()))
	}
	return dl.Dir, nil
}

// escape is the module cache's case encoding: each upper-case letter becomes '!' and the letter
// in lower case, so that paths differing only in case stay apart on case-insensitive disks.
func escape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if unicode.IsUpper(c) {
			b.WriteByte('!')
			c = unicode.ToLower(c)
		}
		b.WriteRune(c)
	}
	return b.String()
}

// readFiles reads the files at the root of dir whose names match, sorted by name.
func readFiles(dir, ref string, name *regexp.Regexp) ([]File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []File
	for _, e := range entries {
		if e.IsDir() || !name.MatchString(e.Name()) {
			continue
		}
		text, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		files = append(files, File{Ref: path.Join(ref, e.Name()), Text: string(text)})
	}
	return files, nil
}

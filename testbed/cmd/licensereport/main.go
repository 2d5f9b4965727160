// Command licensereport writes THIRD_PARTY_LICENSES.md and NOTICE from the modules the shipped
// binaries link, and fails when one of them carries a GNU licence (GPL, LGPL, AGPL), a licence its
// classifier does not recognise, or none, unless allowlist.txt accepts it with a reason.
//
//	go run ./testbed/cmd/licensereport -binary NAME=FILE... [-check] [-dir DIR]
//
// `make licenses` runs it on bin/otelcol-kubetrail and bin/kubetrail; `make licenses-check`
// (part of `make dist-test`) runs it with -check, which writes nothing and fails when the
// checked-in files differ from what it would write.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

type binaries []Binary

func (b *binaries) String() string { return fmt.Sprint(*b) }

func (b *binaries) Set(s string) error {
	name, file, ok := strings.Cut(s, "=")
	if !ok || name == "" || file == "" {
		return errors.New("want NAME=FILE")
	}
	*b = append(*b, Binary{Name: name, File: file})
	return nil
}

func main() {
	var bins binaries
	flag.Var(&bins, "binary", "a shipped binary, NAME=FILE (repeat for each)")
	dir := flag.String("dir", ".", "where THIRD_PARTY_LICENSES.md and NOTICE are (the repository's root)")
	allowFile := flag.String("allowlist", "testbed/cmd/licensereport/allowlist.txt", "the reviewed exceptions")
	check := flag.Bool("check", false, "write nothing; fail when the files differ from a regeneration")
	flag.Parse()
	if len(bins) == 0 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: licensereport -binary NAME=FILE... [-check] [-dir DIR] [-allowlist FILE]")
		os.Exit(2)
	}
	if err := run(bins, *dir, *allowFile, *check); err != nil {
		fmt.Fprintln(os.Stderr, "licensereport:", err)
		os.Exit(1)
	}
}

func run(bins []Binary, dir, allowFile string, check bool) error {
	f, err := os.Open(allowFile)
	if err != nil {
		return err
	}
	allow, err := ReadAllowlist(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", allowFile, err)
	}
	mods, err := Linked(bins)
	if err != nil {
		return err
	}
	problems, reviewed := Check(mods, allow)
	if len(problems) > 0 {
		return fmt.Errorf("%d module(s) cannot ship as they are (review them and add a line to %s, or drop the dependency):\n  %s",
			len(problems), allowFile, strings.Join(problems, "\n  "))
	}
	want := map[string]string{
		"THIRD_PARTY_LICENSES.md": Report(bins, mods, reviewed),
		"NOTICE":                  Notice(mods),
	}
	var stale []string
	for _, name := range []string{"THIRD_PARTY_LICENSES.md", "NOTICE"} {
		file := filepath.Join(dir, name)
		if !check {
			if err := os.WriteFile(file, []byte(want[name]), 0o644); err != nil {
				return err
			}
			continue
		}
		have, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		if d := firstDifference(string(have), want[name]); d != "" {
			stale = append(stale, name+": "+d)
		}
	}
	if len(stale) > 0 {
		return fmt.Errorf("out of date with what the binaries link (run make licenses and commit the result):\n  %s", strings.Join(stale, "\n  "))
	}
	fmt.Printf("licensereport: %d modules linked into %d binaries, every licence allowed (%d reviewed exceptions)\n", len(mods), len(bins), len(reviewed))
	return nil
}

// firstDifference says where have first departs from want, by line, or "" when they are equal.
func firstDifference(have, want string) string {
	if have == want {
		return ""
	}
	h, w := strings.Split(have, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(h) || i < len(w); i++ {
		var hl, wl string
		if i < len(h) {
			hl = h[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if hl != wl || i >= len(h) || i >= len(w) {
			return fmt.Sprintf("line %d is %q, a regeneration has %q", i+1, hl, wl)
		}
	}
	return "they differ"
}

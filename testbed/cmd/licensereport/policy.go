package main

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"
)

// An Exception is one reviewed module whose licence is not in [Allowed] (or could not be
// recognised), accepted for a stated reason. It names the licence expression the review saw, so
// that a module whose licence changes is reviewed again.
type Exception struct {
	Module, Licence, Reason string
	Line                    int
}

// ReadAllowlist reads the reviewed exceptions: one a line, "module | licence | reason", where
// licence is the report's expression for the module ("none found" and "unknown" included) and
// the reason is required. Blank lines and lines starting with '#' are comments.
func ReadAllowlist(r io.Reader) ([]Exception, error) {
	var list []Exception
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.SplitN(line, "|", 3)
		if len(f) != 3 {
			return nil, fmt.Errorf("line %d: want \"module | licence | reason\", got %q", n, line)
		}
		e := Exception{Module: strings.TrimSpace(f[0]), Licence: strings.TrimSpace(f[1]), Reason: strings.TrimSpace(f[2]), Line: n}
		if e.Module == "" || e.Licence == "" || e.Reason == "" {
			return nil, fmt.Errorf("line %d: module, licence and reason are all required, got %q", n, line)
		}
		if slices.ContainsFunc(list, func(o Exception) bool { return o.Module == e.Module }) {
			return nil, fmt.Errorf("line %d: %s is listed twice", n, e.Module)
		}
		list = append(list, e)
	}
	return list, sc.Err()
}

// Check returns what keeps the modules from shipping: each module carrying a licence outside
// [Allowed] (a GNU licence, an unrecognised text, no licence file at all) that no exception
// accepts, and each exception that accepts nothing any more (stale reviews hide nothing, but
// they make the next reader trust a review of something else). reviewed maps a module's path to
// the exception that accepted it.
func Check(mods []*Module, allow []Exception) (problems []string, reviewed map[string]Exception) {
	reviewed = map[string]Exception{}
	for _, m := range mods {
		if allowed(m) {
			continue
		}
		i := slices.IndexFunc(allow, func(e Exception) bool { return e.Module == m.Path })
		if i >= 0 && allow[i].Licence == m.Expression() {
			reviewed[m.Path] = allow[i]
			continue
		}
		p := fmt.Sprintf("%s@%s (linked into %s): licence %s", m.Path, m.Version, strings.Join(m.In, ", "), m.Expression())
		switch {
		case len(m.LicenceFiles) == 0:
			p += ": no LICENSE, LICENCE or COPYING file at the module's root"
		case slices.Contains(m.Licences, Unknown):
			p += " in " + refs(m.LicenceFiles) + ": no rule recognises it"
		default:
			p += " in " + refs(m.LicenceFiles) + ": not a licence kubetrail may link without review"
		}
		if i >= 0 {
			p += fmt.Sprintf(" (the allowlist's line %d reviewed %q)", allow[i].Line, allow[i].Licence)
		}
		problems = append(problems, p)
	}
	for _, e := range allow {
		if _, ok := reviewed[e.Module]; !ok && !slices.ContainsFunc(mods, func(m *Module) bool {
			return m.Path == e.Module && !allowed(m)
		}) {
			problems = append(problems, fmt.Sprintf("allowlist line %d: %s is not linked with a licence that needs review: remove the line", e.Line, e.Module))
		}
	}
	return problems, reviewed
}

func allowed(m *Module) bool {
	return len(m.Licences) > 0 && !slices.ContainsFunc(m.Licences, func(id string) bool { return !Allowed[id] })
}

func refs(files []File) string {
	var r []string
	for _, f := range files {
		r = append(r, f.Ref)
	}
	return strings.Join(r, ", ")
}

package trail

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/kubetrail/kubetrail/internal/model"
)

// ChangeLine is one write on one line: time, cluster, object, user, verb, answer, and what it
// changed (old→new) or why it was refused. Values are shortened as the tree shortens them;
// width, when positive, cuts the whole line to that many characters (a terminal's width).
func ChangeLine(w Write, days bool, width int) string {
	t := clock(w.Time)
	if days {
		t = w.Time.UTC().Format("01-02 ") + t
	}
	parts := []string{t, w.Cluster, w.Object(), shortUser(w.User), w.VerbText(), w.Answer()}
	switch {
	case w.Message != "" && len(w.Tried) > 0:
		parts = append(parts, "✗ tried "+inlineChanges(w.Tried, w.TriedPaths)+": "+shorten(w.Message, 100))
	case w.Message != "":
		parts = append(parts, "✗ "+shorten(w.Message, 100))
	case len(w.Changes) > 0:
		parts = append(parts, inlineChanges(w.Changes, w.ChangedPaths))
	case w.NoOp:
		parts = append(parts, "(no change)")
	case w.NoDiff != "":
		parts = append(parts, "(no diff: "+w.NoDiff+")")
	}
	line := strings.Join(nonEmpty(parts), "  ")
	if width > 1 && utf8.RuneCountInString(line) > width {
		r := []rune(line)
		line = string(r[:width-1]) + "…"
	}
	return line
}

func shortUser(u string) string {
	if u == "" {
		return "?"
	}
	return model.ShortUser(u)
}

// inlineChanges is a diff on one line, as the tree writes it.
func inlineChanges(changes []Change, total int) string {
	var parts []string
	for i, c := range changes {
		if i == maxChanges {
			break
		}
		parts = append(parts, c.Path+" "+shorten(c.Old, maxValue)+"→"+shorten(c.New, maxValue))
	}
	out := strings.Join(parts, ", ")
	if more := total - min(len(changes), maxChanges); more > 0 {
		out += fmt.Sprintf(" +%d more", more)
	}
	return out
}

// spansDays reports whether writes fall on more than one UTC day: their lines then carry the
// date.
func spansDays(ws []Write) bool {
	for _, w := range ws {
		if w.Time.UTC().YearDay() != ws[0].Time.UTC().YearDay() || w.Time.UTC().Year() != ws[0].Time.UTC().Year() {
			return true
		}
	}
	return false
}

// WriteChanges prints a change feed, one write per line, newest first, under a header saying
// what was searched.
func WriteChanges(out io.Writer, res *ChangeResult, since, until time.Time, width int) {
	l := lines{out}
	noun := "writes"
	if res.Matched == 1 {
		noun = "write"
	}
	shown := ""
	if len(res.Writes) < res.Matched {
		shown = fmt.Sprintf(", the newest %d shown", len(res.Writes))
	}
	l.printf("%d %s from %s to %s%s", res.Matched, noun, rangeStamp(since, "the beginning"), rangeStamp(until, "now"), shown)
	days := spansDays(res.Writes)
	for _, w := range res.Writes {
		l.printf("%s", ChangeLine(w, days, width))
	}
}

func rangeStamp(t time.Time, zero string) string {
	if t.IsZero() {
		return zero
	}
	return stamp(t)
}

// WriteDiff prints an object's writes in time order, each with every path it changed
// (old → new, whole), for `kubetrail show --diff`.
func WriteDiff(out io.Writer, object string, ws []Write, from, to time.Time) {
	l := lines{out}
	noun := "writes"
	if len(ws) == 1 {
		noun = "write"
	}
	l.printf("%s: %d %s after %s until %s", object, len(ws), noun, stamp(from), stamp(to))
	for _, w := range ws {
		l.blank()
		l.printf("%s  %s  %s  %s", stamp(w.Time), shortUser(w.User), w.VerbText(), w.Answer())
		switch {
		case w.Message != "":
			l.printf("    ✗ %s", w.Message)
		case w.NoOp:
			l.printf("    (no change)")
		case w.NoDiff != "":
			l.printf("    (no diff: %s)", noDiffText(w.NoDiff))
		}
		for _, c := range w.Changes {
			l.printf("    %s: %s → %s", c.Path, orAbsent(c.Old), orAbsent(c.New))
		}
		for _, c := range w.Tried {
			l.printf("    tried %s: %s → %s", c.Path, orAbsent(c.Old), orAbsent(c.New))
		}
		if more := w.ChangedPaths - len(w.Changes); more > 0 {
			l.printf("    +%d more paths the receiver did not list (its bound is 128)", more)
		}
	}
}

func orAbsent(v string) string {
	if v == "" {
		return "∅"
	}
	return v
}

// noDiffText says what a write's missing diff means.
func noDiffText(reason string) string {
	switch reason {
	case "base_not_seen":
		return "base_not_seen: the collector did not hold the body the write was based on"
	case "out_of_order":
		return "out_of_order: it arrived after a newer write of the object"
	case "no_body":
		return "no_body: its audit record had no response body (the policy's level), or its subresource answers with another kind"
	}
	return reason
}

// WriteChangesJSON writes the change feed as JSON: the range, the counts and the writes.
func WriteChangesJSON(out io.Writer, res *ChangeResult, since, until time.Time) error {
	ws := res.Writes
	if ws == nil {
		ws = []Write{}
	}
	doc := struct {
		Since     *time.Time `json:"since,omitempty"`
		Until     *time.Time `json:"until,omitempty"`
		Matched   int        `json:"matched"`
		Shown     int        `json:"shown"`
		SearchCut []string   `json:"search_cut,omitempty"`
		Writes    []Write    `json:"writes"`
	}{timeOrNil(since), timeOrNil(until), res.Matched, len(ws), res.SearchCut, ws}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

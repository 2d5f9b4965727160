package trail

import (
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/kubetrail/kubetrail/internal/model"
)

// FormatDuration prints a duration at a precision a reader needs: µs below a millisecond, ms
// with one decimal below a second, seconds with two decimals below a minute.
func FormatDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + FormatDuration(-d)
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return trimZero(fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))) + "ms"
	case d < time.Minute:
		return trimZero(fmt.Sprintf("%.2f", d.Seconds())) + "s"
	}
	return d.Round(time.Second).String()
}

func trimZero(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

func clock(t time.Time) string { return t.UTC().Format("15:04:05.000") }

// maxValue bounds one diff value in the tree and timeline (the page shows them whole).
const maxValue = 40

// maxChanges is how many changes of one diff the tree prints inline.
const maxChanges = 3

func shorten(s string, n int) string {
	if s == "" {
		return "∅"
	}
	s = strings.ReplaceAll(s, "\n", " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// InlineDiff is a diff as one line: "spec.replicas 3→6, spec.template… +2 more".
func InlineDiff(s *Span) string {
	changes, total := s.Diff()
	if len(changes) == 0 {
		return ""
	}
	return inlineChanges(changes, total)
}

// Marks are the flags of an activity line.
func Marks(s *Span) string {
	var m []string
	if s.IsConflict() {
		m = append(m, "CONFLICT")
	} else if s.Failed() {
		m = append(m, "ERROR")
	}
	return strings.Join(m, " ")
}

func objectLine(n *Node) string {
	var b strings.Builder
	b.WriteString(n.Object.DisplayName())
	if life := life(n); life != "" {
		b.WriteString("  [" + life + "]")
	}
	fmt.Fprintf(&b, "  %d spans", len(n.Spans))
	if len(n.Windows) > 1 {
		fmt.Fprintf(&b, ", %d windows", len(n.Windows))
	}
	return b.String()
}

// life is an object's lifetime as the tree shows it: "created 10:45:54.317, deleted
// 10:45:56.020, 1.7s" ("first seen", "last seen" where the range holds no create or delete).
func life(n *Node) string {
	created, deleted, first, last := n.Lifetime()
	var life []string
	if !created.IsZero() {
		life = append(life, "created "+clock(created))
	} else if !first.IsZero() {
		life = append(life, "first seen "+clock(first))
	}
	if !deleted.IsZero() {
		life = append(life, "deleted "+clock(deleted))
	} else if !last.IsZero() {
		life = append(life, "last seen "+clock(last))
	}
	if !first.IsZero() {
		end := last
		if !deleted.IsZero() {
			end = deleted
		}
		from := first
		if !created.IsZero() {
			from = created
		}
		life = append(life, FormatDuration(end.Sub(from)))
	}
	return strings.Join(life, ", ")
}

func activityLine(s *Span) string {
	parts := []string{clock(s.Start), s.Actor(), s.Verb()}
	if s.Type == "event" {
		parts = append(parts, s.Str("k8s.event.reason"))
		if note := s.Str("k8s.event.note"); note != "" {
			parts = append(parts, "\""+shorten(note, 60)+"\"")
		}
	} else {
		parts = append(parts, s.Result(), FormatDuration(s.Duration()))
	}
	if d := s.Detail(); d != "" {
		parts = append(parts, "longest: "+d)
	}
	if s.Type == model.SpanTypeLinked {
		parts = append(parts, "(links to the object's trace context)")
	}
	if d := InlineDiff(s); d != "" {
		parts = append(parts, d)
	}
	if m := Marks(s); m != "" {
		parts = append(parts, "✗ "+m)
		by, why := RefusedBy(s)
		if why != "" {
			by += ": " + shorten(why, 80)
		}
		if t := Tried(s); t != "" {
			if by != "" {
				t += ", " + by
			}
			parts = append(parts, t)
		} else if by != "" {
			parts = append(parts, by)
		}
		if msg := s.ErrorMessage(); msg != "" && !s.IsConflict() && by == "" {
			parts = append(parts, shorten(msg, 80))
		}
	}
	return strings.Join(nonEmpty(parts), "  ")
}

// Tried is what a refused write tried, as one line: "tried spec.replicas 2→40".
func Tried(s *Span) string {
	changes, total := s.Attempted()
	if len(changes) == 0 {
		return ""
	}
	return "tried " + inlineChanges(changes, total)
}

var (
	refusedByPolicy  = regexp.MustCompile(`ValidatingAdmissionPolicy '([^']+)' with binding '[^']*' denied request(?::\s*(.*))?`)
	refusedByWebhook = regexp.MustCompile(`admission webhook "([^"]+)" denied the request(?::\s*(.*))?`)
)

// RefusedBy names what refused a write, read from its error message: "denied by
// ValidatingAdmissionPolicy max-replicas", "denied by admission webhook images.example.com",
// and why, as the message goes on ("failed expression: object.spec.replicas <= 10"); "" when
// the message names neither.
func RefusedBy(s *Span) (by, why string) {
	msg := s.ErrorMessage()
	if m := refusedByPolicy.FindStringSubmatch(msg); m != nil {
		return "denied by ValidatingAdmissionPolicy " + m[1], m[2]
	}
	if m := refusedByWebhook.FindStringSubmatch(msg); m != nil {
		return "denied by admission webhook " + m[1], m[2]
	}
	return "", ""
}

func nonEmpty(s []string) []string {
	out := s[:0]
	for _, x := range s {
		if strings.TrimSpace(x) != "" {
			out = append(out, strings.TrimSpace(x))
		}
	}
	return out
}

func activityLabel(a Activity) string {
	label := a.Span.Actor() + " " + a.Span.Verb()
	if d := a.Span.Detail(); d != "" {
		label += ", longest " + d // the kubelet's sync: which CRI call took its time
	}
	return label + " (" + a.Node.Object.DisplayName() + ")"
}

// SummaryHeadline is the first line of the summary, without "Why is it slow: ": how long, from
// which write, until when — the tree ready, or the last activity when readiness is not told.
func SummaryHeadline(sum Summary) string {
	h := FormatDuration(sum.Total) + " from " + activityLabel(sum.From) + " at " + clock(sum.From.Span.Start)
	to := sum.To.Span.Actor() + " " + sum.To.Span.Verb() + ": " + sum.To.Node.Object.DisplayName()
	if sum.Ready {
		return h + " until ready at " + clock(sum.To.Span.End) + " (" + to + " " + sum.Why + ")"
	}
	return h + " until the last activity at " + clock(sum.To.Span.End) + " (" + to + "; readiness not told by the spans)"
}

// WaitsLine lists waits as "deployment-controller 71.4ms (25), …".
func WaitsLine(ws []ActorWait) string {
	var parts []string
	for _, aw := range ws {
		parts = append(parts, fmt.Sprintf("%s %s (%d)", aw.Actor, FormatDuration(aw.Total), aw.Count))
	}
	return strings.Join(parts, ", ")
}

// WriteSummary prints the "why is it slow" block: by generation when the root is a workload
// that went through several rollouts in range (one headline and the waits by role each), else
// for the whole range.
func WriteSummary(w io.Writer, n *Node, h Header) {
	if !rolledOut[n.Object.Kind] || h.Generation != nil {
		writeSummary(w, n, h)
		return
	}
	if gens, sums := SummarizeGenerations(n, Generations(n)); len(gens) >= 2 {
		l := lines{w}
		l.printf("Why is it slow, by rollout (show one with --generation N):")
		for i, sum := range sums {
			l.printf("  %s: %s", gens[i].Label(), SummaryHeadline(sum))
			if len(sum.ByRole) > 0 {
				l.printf("    waiting on, by role: %s", WaitsLine(sum.ByRole))
			}
		}
		l.blank()
		return
	}
	writeSummary(w, n, h)
}

// rolledOut are the kinds whose generations are rollouts of Pods: the summary groups by them.
// Other objects' generations (a Pod's, bumped by its own updates) are not intents worth a
// summary each; --generation still selects any object's.
var rolledOut = map[string]bool{"Deployment": true, "StatefulSet": true, "DaemonSet": true, "ReplicaSet": true, "ReplicationController": true}

func writeSummary(w io.Writer, n *Node, h Header) {
	sum, ok := h.summary(n)
	if !ok {
		return
	}
	l := lines{w}
	l.printf("Why is it slow: %s", SummaryHeadline(sum))
	l.printf("  requests in flight %s, waiting between steps %s, waiting for the user's next command %s",
		FormatDuration(sum.Busy), FormatDuration(sum.Total-sum.Busy-sum.UserPause), FormatDuration(sum.UserPause))
	if len(sum.Waits) > 0 {
		l.printf("  longest waits:")
		for _, wt := range sum.Waits {
			l.printf("    %8s  waiting on %s: after %s until %s  (%s → %s)", FormatDuration(wt.Gap), wt.Before.Span.Actor(),
				activityLabel(wt.After), activityLabel(wt.Before), clock(wt.After.Span.End), clock(wt.Before.Span.Start))
		}
	}
	if len(sum.WaitingOn) > 0 {
		l.printf("  waiting on, by role: %s", WaitsLine(sum.ByRole))
		l.printf("  waiting on, by actor: %s", WaitsLine(sum.WaitingOn))
	}
	l.blank()
}

// Header describes what was read: windows, traces, spans.
type Header struct {
	Cluster string
	Traces  []FetchedTrace
	Others  []string // other UIDs the name had
	// Generation is the rollout --generation asked for; nil for every generation. Rollout is
	// its summary, computed over the whole tree (the states its rollout began from).
	Generation *Generation
	Rollout    *Summary
}

// summary is the "why is it slow" of the output: the rollout's, or else n's.
func (h Header) summary(n *Node) (Summary, bool) {
	if h.Rollout != nil {
		return *h.Rollout, true
	}
	return Summarize(n)
}

// WriteHeader writes the lines that head the tree: the object, its spans, traces and windows.
func WriteHeader(w io.Writer, n *Node, h Header) { writeHeader(w, n, h) }

func writeHeader(w io.Writer, n *Node, h Header) {
	spans := 0
	n.Walk(func(x *Node) { spans += len(x.Spans) + len(x.Windows) })
	var ws []string
	for _, s := range n.Windows {
		layout := "15:04"
		if s.Start.Second() != 0 || s.End.Second() != 0 { // windows shorter than a minute
			layout = "15:04:05"
		}
		ws = append(ws, s.Start.UTC().Format("2006-01-02 "+layout)+"–"+s.End.UTC().Format(layout))
	}
	l := lines{w}
	l.printf("%s in cluster %s: %s, %s, %s %s UTC", n.Object.DisplayName(), n.Cluster, plural(spans, "span"), plural(len(h.Traces), "trace"),
		map[bool]string{true: "window", false: "windows"}[len(ws) == 1], strings.Join(ws, ", "))
	if len(h.Others) > 0 {
		l.printf("(this name also had uid %s in range: show it with --uid)", strings.Join(h.Others, ", "))
	}
	if g := h.Generation; g != nil {
		until := "the end of the range"
		if !g.End.IsZero() {
			until = clock(g.End) + ", when the next generation began"
		}
		l.printf("Rollout to %s: from %s until %s", g.Label(), clock(g.Start), until)
	}
}

// WriteTree prints the indented tree.
func WriteTree(w io.Writer, n *Node, h Header) {
	l := lines{w}
	writeHeader(w, n, h)
	l.blank()
	WriteSummary(w, n, h)
	n.Walk(func(x *Node) {
		ind := strings.Repeat("  ", x.Depth)
		l.printf("%s%s", ind, objectLine(x))
		for _, s := range x.Spans {
			l.printf("%s  · %s", ind, activityLine(s))
		}
		if x.Cut > 0 {
			l.printf("%s  %s", ind, cutLine(x))
		}
	})
}

// Timeline geometry: the label column and the bar width in characters.
const (
	labelWidth = 48
	barWidth   = 64
)

// WriteTimeline prints the activity of the whole tree on one time axis.
func WriteTimeline(w io.Writer, n *Node, h Header) {
	l := lines{w}
	writeHeader(w, n, h)
	l.blank()
	WriteSummary(w, n, h)
	start, end, span, ok := n.Extent()
	if !ok {
		return
	}
	col := func(t time.Time) int {
		c := int(float64(t.Sub(start)) / float64(span) * float64(barWidth))
		return max(0, min(barWidth-1, c))
	}
	l.printf("%s → %s (%s), one column = %s", clock(start), clock(end), FormatDuration(span), FormatDuration(span/barWidth))
	axis := []rune(strings.Repeat(" ", barWidth))
	for i := 0; i <= 4; i++ {
		axis[min(barWidth-1, i*barWidth/4)] = '|'
	}
	l.printf("%-*s %s", labelWidth, "", string(axis))
	row := func(label string, from, to time.Time, ch rune) {
		bar := []rune(strings.Repeat(" ", barWidth))
		a, b := col(from), col(to)
		for i := a; i <= b; i++ {
			bar[i] = ch
		}
		// Escaped before padding, so that an escaped label keeps the bars in their column.
		l.printf("%s %s", padRunes(Escape(label), labelWidth), strings.TrimRight(string(bar), " "))
	}
	n.Walk(func(x *Node) {
		ind := strings.Repeat("  ", x.Depth)
		_, _, first, last := x.Lifetime()
		if first.IsZero() {
			l.printf("%s", padRunes(Escape(ind+x.Object.DisplayName()), labelWidth))
		} else {
			row(ind+x.Object.DisplayName(), first, last, '─')
			for _, s := range x.Spans {
				ch := '█'
				if s.Failed() {
					ch = '✗'
				}
				row(ind+"  "+s.Actor()+" "+s.Verb(), s.Start, s.End, ch)
			}
		}
		if x.Cut > 0 {
			l.printf("%s  %s", ind, cutLine(x))
		}
	})
}

// cutLine says that x owns objects the tree does not show (Node.Cut).
func cutLine(x *Node) string {
	return fmt.Sprintf("… %s not shown: deeper than %d levels of owners, the bound the processor keeps",
		plural(x.Cut, "owned object"), model.MaxOwnerDepth)
}

func padRunes(s string, n int) string {
	r := []rune(s)
	if len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s + strings.Repeat(" ", n-len(r))
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

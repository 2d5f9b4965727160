package viewer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
)

// objectPage is one object's story: the tree merged across windows, a timeline, the summary,
// and, at a write, that write's whole diff and the manifest it left.
type objectPage struct {
	Title   string
	Header  string
	Summary string
	Back    string
	Windows []windowLink
	Tree    *trail.PageNode
	Axis    string
	Rows    []timelineRow
	// At is the time asked for (at=): the write answered last at or before it is Write, the
	// manifest it left Manifest (or why it is not known, NotKnown).
	At       time.Time
	Write    *trail.Write
	Manifest string
	NotKnown string
}

type windowLink struct {
	TraceID, Start, URL string
}

type timelineRow struct {
	Label, Title string
	Indent       int
	Object, Err  bool
	// X and W are the bar's start and width, in percent of the axis.
	X, W string
	// Bands, on a state row, are the object's states over time (a Pod's phase and Ready, a
	// Deployment's available replicas, a Node's Ready), each from the write that made it.
	Bands []band
}

// band is one state of an object on the timeline.
type band struct {
	X, W, Label, Class string
}

// object is the object page: /object?kind=&namespace=&name=[&uid=&cluster=&since=&until=&at=].
func (s *Server) object(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	now := s.now()
	t := trail.Target{Kind: q.Get("kind"), Namespace: q.Get("namespace"), Name: q.Get("name"), UID: q.Get("uid"), Cluster: q.Get("cluster")}
	if t.Cluster == "" {
		t.Cluster = s.Cluster
	}
	if t.Kind == "" || t.Name == "" {
		s.fail(w, http.StatusBadRequest, "reading the object", badf("kind and name are required, e.g. /object?kind=Deployment&namespace=shop&name=web"))
		return
	}
	k := trail.ResolveKind(t.Kind)
	t.Kind, t.Group, t.Resource = k.Kind, k.Group, k.Resource
	since, err := s.timeParam(q, "since", now)
	if err == nil && since.IsZero() && s.DefaultSince > 0 {
		since = now.Add(-s.DefaultSince)
	}
	var until, at time.Time
	if err == nil {
		until, err = s.timeParam(q, "until", now)
	}
	if err == nil {
		at, err = s.timeParam(q, "at", now)
	}
	if err != nil {
		s.fail(w, http.StatusBadRequest, "reading the object", err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	found, err := trail.Find(ctx, s.Source, trail.Query{Target: t, Since: since, Until: until, Window: s.Window})
	if err != nil {
		code := http.StatusBadGateway
		if errors.Is(err, trail.ErrUnknownObject) {
			code = http.StatusNotFound
		}
		s.fail(w, code, "finding "+t.String(), err)
		return
	}
	root, err := trail.Merge(found.Spans, t, found.UID, trail.Filter{Since: since, Until: until, Depth: -1})
	if err != nil {
		s.fail(w, http.StatusNotFound, "merging "+t.String(), err)
		return
	}
	h := trail.Header{Traces: found.Traces, Others: found.Others}
	var head, sum strings.Builder
	trail.WriteHeader(&head, root, h)
	trail.WriteSummary(&sum, root, h)
	p := objectPage{Title: "kubetrail: " + root.Object.DisplayName(), Header: strings.TrimSpace(head.String()), Summary: strings.TrimSpace(sum.String()),
		Back: "/?" + backQuery(root), At: at}
	if base := s.jaegerUI(); base != "" {
		for _, win := range root.Windows {
			p.Windows = append(p.Windows, windowLink{TraceID: win.TraceID.String(), Start: win.Start.UTC().Format("2006-01-02 15:04"), URL: base + "/trace/" + win.TraceID.String()})
		}
	}
	if !at.IsZero() {
		m, err := trail.ManifestAt(found.Spans, found.UID, at)
		if err != nil {
			p.NotKnown = err.Error()
		} else {
			b, err := yaml.Marshal(m.Object)
			if err != nil {
				s.fail(w, http.StatusInternalServerError, "writing the manifest", err)
				return
			}
			p.Manifest = string(b)
			wr := trail.WriteOf(m.After)
			p.Write = &wr
		}
	}
	p.Tree = tree(root, since, until)
	p.Axis, p.Rows = timeline(root, found.Spans)
	s.render(w, http.StatusOK, "object.html", p)
}

// backQuery is the search of the object's writes, for the page's link back to the feed.
func backQuery(n *trail.Node) string {
	q := url.Values{"object": {n.Object.Kind + "/" + n.Object.Name}, "namespace": {n.Object.Namespace}, "cluster": {n.Cluster}}
	return q.Encode()
}

// tree is the page's tree: each write links to the page at that write (its diff and manifest),
// anchored at its line, which the style sheet marks (:target).
func tree(n *trail.Node, since, until time.Time) *trail.PageNode {
	return trail.PageTree(n, func(x *trail.Node, sp *trail.Span) string {
		if !sp.IsWrite() {
			return ""
		}
		return objectURL(x.Object.Kind, x.Object.Namespace, x.Object.Name, x.Object.UID, x.Cluster, sp.End, since, until, "w-"+sp.SpanID.String())
	})
}

func clock(t time.Time) string { return t.UTC().Format("15:04:05.000") }

// timeline lays out every object's life, states and activity on one axis.
func timeline(n *trail.Node, spans []*trail.Span) (string, []timelineRow) {
	start, end, total, ok := n.Extent()
	if !ok {
		return "", nil
	}
	pct := func(d time.Duration) string {
		v := 100 * float64(d) / float64(total)
		return fmt.Sprintf("%.3f%%", min(max(v, 0), 100))
	}
	width := func(d time.Duration) string {
		v := 100 * float64(d) / float64(total)
		return fmt.Sprintf("%.3f%%", min(max(v, 0.2), 100))
	}
	var rows []timelineRow
	n.Walk(func(x *trail.Node) {
		_, _, first, last := x.Lifetime()
		if first.IsZero() {
			return
		}
		rows = append(rows, timelineRow{Label: x.Object.DisplayName(), Title: x.Object.DisplayName(), Indent: x.Depth, Object: true,
			X: pct(first.Sub(start)), W: width(last.Sub(first))})
		if bs, now := bands(x, spans, start, total); len(bs) > 0 {
			rows = append(rows, timelineRow{Label: "state: " + now, Title: x.Object.DisplayName() + ": " + now, Indent: x.Depth + 1, Bands: bs})
		}
		for _, sp := range x.Spans {
			rows = append(rows, timelineRow{Label: sp.Actor() + " " + sp.Verb(), Title: clock(sp.Start) + " " + sp.Name + " " + trail.FormatDuration(sp.Duration()),
				Indent: x.Depth + 1, Err: sp.Failed(), X: pct(sp.Start.Sub(start)), W: width(sp.Duration())})
		}
	})
	return fmt.Sprintf("%s → %s UTC (%s)", clock(start), clock(end), trail.FormatDuration(total)), rows
}

// bands are the states of n's object between its first state and its end (its delete, or the
// axis's end), and the last state's label.
func bands(n *trail.Node, spans []*trail.Span, start time.Time, total time.Duration) ([]band, string) {
	states := trail.States(spans, n.Object.UID)
	if len(states) == 0 {
		return nil, ""
	}
	_, deleted, _, last := n.Lifetime()
	end := last
	if !deleted.IsZero() {
		end = deleted
	}
	type span struct {
		from, to     time.Time
		label, class string
	}
	var merged []span
	for i, st := range states {
		l, class := stateLabel(n.Object.Kind, st)
		if l == "" {
			return nil, "" // a kind without states the viewer knows
		}
		to := end
		if i+1 < len(states) {
			to = states[i+1].At
		}
		if k := len(merged) - 1; k >= 0 && merged[k].label == l {
			merged[k].to = to // the same state again: one band
			continue
		}
		merged = append(merged, span{st.At, to, l, class})
	}
	pct := func(t time.Time) float64 { return min(max(100*float64(t.Sub(start))/float64(total), 0), 100) }
	out := make([]band, len(merged))
	for i, m := range merged {
		out[i] = band{X: fmt.Sprintf("%.3f%%", pct(m.from)), W: fmt.Sprintf("%.3f%%", max(pct(m.to)-pct(m.from), 0.2)), Label: m.label, Class: m.class}
	}
	return out, merged[len(merged)-1].label
}

// stateLabel names an object's state as an operator reads it, and its colour class: ok (ready),
// wait (progressing), bad (failed) or unknown. "" for kinds without one.
func stateLabel(kind string, st trail.State) (string, string) {
	if st.Object == nil {
		switch kind {
		case "Pod", "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Node", "Job":
			return "not known: " + st.Why, "unknown"
		}
		return "", ""
	}
	status, _ := st.Object["status"].(map[string]any)
	spec, _ := st.Object["spec"].(map[string]any)
	num := func(m map[string]any, k string) int64 {
		f, _ := m[k].(float64)
		return int64(f)
	}
	switch kind {
	case "Pod":
		phase, _ := status["phase"].(string)
		if phase == "" {
			phase = "Pending"
		}
		switch {
		case phase == "Failed":
			return phase, "bad"
		case phase == "Succeeded":
			return phase, "ok"
		case condition(status, "Ready") == "True":
			return phase + ", ready", "ok"
		}
		return phase + ", not ready", "wait"
	case "Deployment", "ReplicaSet", "StatefulSet":
		want := int64(1)
		if _, ok := spec["replicas"]; ok {
			want = num(spec, "replicas")
		}
		avail := num(status, "availableReplicas")
		class := "wait"
		if avail == want {
			class = "ok"
		}
		return fmt.Sprintf("%d/%d available", avail, want), class
	case "DaemonSet":
		avail, want := num(status, "numberAvailable"), num(status, "desiredNumberScheduled")
		class := "wait"
		if avail == want {
			class = "ok"
		}
		return fmt.Sprintf("%d/%d available", avail, want), class
	case "Node":
		if condition(status, "Ready") == "True" {
			return "Ready", "ok"
		}
		return "NotReady", "bad"
	case "Job":
		if num(status, "failed") > 0 && condition(status, "Failed") == "True" {
			return "failed", "bad"
		}
		if condition(status, "Complete") == "True" {
			return "complete", "ok"
		}
		return fmt.Sprintf("%d active, %d succeeded", num(status, "active"), num(status, "succeeded")), "wait"
	}
	return "", ""
}

// condition is the status of the condition of type t ("" when absent).
func condition(status map[string]any, t string) string {
	conds, _ := status["conditions"].([]any)
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == t {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}

// jaegerUI is the base of the links to Jaeger's UI: JaegerUI, else a Jaeger source's URL, else
// none.
func (s *Server) jaegerUI() string {
	if s.JaegerUI != "" {
		return strings.TrimRight(s.JaegerUI, "/")
	}
	if j, ok := s.Source.(*trail.Jaeger); ok {
		return j.Base
	}
	return ""
}

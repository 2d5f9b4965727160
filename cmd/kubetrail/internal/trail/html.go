package trail

import (
	"fmt"
	"html/template"
	"io"
	"strings"
	"time"
)

// The page is one file with its style and script inline and no reference to anything outside
// it: it opens from disk, from an attachment, or on a machine without network access.
var page = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<title>kubetrail: {{.Title}}</title>
<style>
body{font:13px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;margin:16px;color:#1d2330;background:#fff}
h1{font-size:17px;margin:0 0 4px} h2{font-size:14px;margin:18px 0 6px}
.meta{color:#5a6372} .summary{background:#f3f6fb;border:1px solid #d5dceb;padding:8px 10px;border-radius:4px}
.summary ol{margin:4px 0 0 18px;padding:0}
details{margin-left:14px} details>summary{cursor:pointer;font-weight:600;padding:1px 0}
details>summary .life{font-weight:400;color:#5a6372}
ul.act{list-style:none;margin:0 0 2px 14px;padding:0}
ul.act li{padding:1px 0;border-bottom:1px dotted #eceff4;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.t{color:#5a6372} .actor{color:#1f5fbf} .verb{font-weight:600} .dur{color:#5a6372}
.diff{color:#236b2a} .diff b{font-weight:400;color:#5a6372} .tried,.tried .diff{color:#8a1c1c;font-style:italic}
li.err{background:#fdecec} li.err .mark{color:#b3261e;font-weight:700}
li.ev .verb{color:#7a4cb3}
.controls button{font:inherit;margin-right:6px}
#timeline .row{position:relative;height:16px;border-bottom:1px solid #f0f2f6}
#timeline .lbl{position:absolute;left:0;width:340px;overflow:hidden;white-space:nowrap;text-overflow:ellipsis}
#timeline .lane{position:absolute;left:350px;right:0;top:2px;bottom:2px}
#timeline .bar{position:absolute;top:0;bottom:0;min-width:2px;background:#4d7fd6;border-radius:2px}
#timeline .bar.err{background:#d0342c} #timeline .bar.obj{background:#c8d3e8;top:5px;bottom:5px}
#timeline .row.o .lbl{font-weight:600}
</style></head><body>
<h1>{{.Title}}</h1>
<div class="meta">{{.Meta}}</div>
{{with .Summary}}<div class="summary" id="summary"><b>Why is it slow:</b> {{.Headline}}
{{if .Waits}}<ol>{{range .Waits}}<li>{{.}}</li>{{end}}</ol>{{end}}
{{if .WaitingOn}}<div>waiting on, by role: {{.ByRole}}</div><div>waiting on, by actor: {{.WaitingOn}}</div>{{end}}</div>{{end}}
<h2>Tree</h2>
<div class="controls"><button type="button" id="expand">expand all</button><button type="button" id="collapse">collapse all</button>
<label><input type="checkbox" id="onlyerr"> errors only</label></div>
<div id="tree">{{template "node" .Root}}</div>
<h2>Timeline</h2>
<div class="meta">{{.Axis}}</div>
<div id="timeline">{{range .Rows}}<div class="row{{if .Object}} o{{end}}" title="{{.Title}}"><span class="lbl" style="padding-left:{{.Indent}}px">{{.Label}}</span><span class="lane"><span class="bar{{if .Object}} obj{{end}}{{if .Err}} err{{end}}" style="left:{{.Left}}%;width:{{.Width}}%"></span></span></div>
{{end}}</div>
<script>
(function(){
  var all=function(){return document.querySelectorAll('#tree details')};
  document.getElementById('expand').onclick=function(){all().forEach(function(d){d.open=true})};
  document.getElementById('collapse').onclick=function(){all().forEach(function(d){d.open=false})};
  document.getElementById('onlyerr').onchange=function(e){
    var on=e.target.checked;
    document.querySelectorAll('#tree li').forEach(function(li){li.style.display=(on&&!li.classList.contains('err'))?'none':''});
  };
  document.body.setAttribute('data-rendered','true');
})();
</script>
</body></html>
{{define "node"}}<details open class="obj" data-object="{{.Name}}"><summary>{{.Name}} <span class="life">{{.Life}}</span></summary>
{{if .Spans}}<ul class="act">{{range .Spans}}<li class="{{.Class}}" title="{{.Title}}"><span class="t">{{.Time}}</span> <span class="actor">{{.Actor}}</span> <span class="verb">{{.Verb}}</span> {{.Result}} <span class="dur">{{.Dur}}</span>{{range .Diff}} <span class="diff">{{.Path}}{{if or .Old .New}} <b>{{.Old}}</b>→{{.New}}{{end}}</span>{{end}}{{if .Tried}} <span class="tried">tried{{range .Tried}} <span class="diff">{{.Path}}{{if or .Old .New}} <b>{{.Old}}</b>→{{.New}}{{end}}</span>{{end}}</span>{{end}}{{if .Mark}} <span class="mark">✗ {{.Mark}}</span> {{.Msg}}{{end}}</li>
{{end}}</ul>{{end}}{{range .Children}}{{template "node" .}}{{end}}</details>{{end}}
`))

type htmlPage struct {
	Title, Meta, Axis string
	Summary           *htmlSummary
	Root              *PageNode
	Rows              []htmlRow
}

type htmlSummary struct {
	Headline          string
	Waits             []string
	WaitingOn, ByRole string
}

// PageNode is one object of a page's tree (this file's page, kubetrail serve's object page): its
// line and its activity, as plain strings the page's template escapes.
type PageNode struct {
	Name, Life string
	Spans      []PageSpan
	Children   []*PageNode
	// Cut is how many owned objects deeper than the owner-chain bound are left out.
	Cut int
}

// PageSpan is one activity line of a PageNode.
type PageSpan struct {
	// ID is the line's anchor: "w-" and the span ID.
	ID, Class, Title, Time, Actor, Verb, Result, Dur, Mark, Msg string
	// Diff holds the changes, values cut at maxHTMLValue, and a last "+N more paths" entry (no
	// values) when the receiver listed fewer than changed.
	Diff []Change
	// Tried is what a refused write tried, cut like Diff.
	Tried []Change
	// Link is where the line leads (the viewer's page at a write); "" for none.
	Link string
}

type htmlRow struct {
	Label, Title string
	Indent       int
	Object, Err  bool
	Left, Width  string
}

// maxHTMLValue bounds one diff value on the page.
const maxHTMLValue = 200

// WriteHTML writes the self-contained page.
func WriteHTML(w io.Writer, n *Node, h Header) error {
	var meta strings.Builder
	writeHeader(&meta, n, h)
	p := htmlPage{Title: n.Object.DisplayName(), Meta: strings.TrimSpace(meta.String())}
	if sum, ok := h.summary(n); ok {
		hs := &htmlSummary{Headline: SummaryHeadline(sum), WaitingOn: WaitsLine(sum.WaitingOn), ByRole: WaitsLine(sum.ByRole)}
		for _, wt := range sum.Waits {
			hs.Waits = append(hs.Waits, fmt.Sprintf("%s waiting on %s: after %s until %s", FormatDuration(wt.Gap), wt.Before.Span.Actor(), activityLabel(wt.After), activityLabel(wt.Before)))
		}
		p.Summary = hs
	}
	p.Root = PageTree(n, nil)
	if start, end, total, ok := n.Extent(); ok {
		pct := func(d time.Duration) string { return fmt.Sprintf("%.3f", 100*float64(d)/float64(total)) }
		p.Axis = fmt.Sprintf("%s → %s UTC (%s)", clock(start), clock(end), FormatDuration(total))
		n.Walk(func(x *Node) {
			_, _, first, last := x.Lifetime()
			if first.IsZero() {
				return
			}
			p.Rows = append(p.Rows, htmlRow{Label: x.Object.DisplayName(), Title: x.Object.DisplayName(), Indent: 12 * x.Depth, Object: true,
				Left: pct(first.Sub(start)), Width: pct(last.Sub(first))})
			for _, s := range x.Spans {
				p.Rows = append(p.Rows, htmlRow{Label: s.Actor() + " " + s.Verb(), Title: clock(s.Start) + " " + s.Name + " " + FormatDuration(s.Duration()),
					Indent: 12*x.Depth + 12, Err: s.Failed(), Left: pct(s.Start.Sub(start)), Width: pct(s.Duration())})
			}
		})
	}
	return page.Execute(w, p)
}

// pageChanges are changes as a page shows them: values cut at maxHTMLValue, and a last
// "+N more paths" entry (no values) when the receiver listed fewer than changed.
func pageChanges(changes []Change, total int) []Change {
	var out []Change
	for _, c := range changes {
		out = append(out, Change{Path: c.Path, Old: shorten(c.Old, maxHTMLValue), New: shorten(c.New, maxHTMLValue)})
	}
	if total > len(changes) {
		out = append(out, Change{Path: fmt.Sprintf("+%d more paths", total-len(changes))})
	}
	return out
}

// PageTree is n's tree for a page; link, when not nil, gives each activity line its link.
func PageTree(n *Node, link func(*Node, *Span) string) *PageNode {
	line := objectLine(n)
	h := &PageNode{Name: n.Object.DisplayName(), Life: strings.TrimSpace(strings.TrimPrefix(line, n.Object.DisplayName())), Cut: n.Cut}
	for _, s := range n.Spans {
		hs := PageSpan{ID: "w-" + s.SpanID.String(), Class: "audit", Title: s.Name, Time: clock(s.Start), Actor: s.Actor(), Verb: s.Verb(), Result: s.Result(), Dur: FormatDuration(s.Duration())}
		if s.Type == "event" {
			hs.Class = "ev"
			hs.Result = s.Str("k8s.event.reason") + " " + s.Str("k8s.event.note")
			hs.Dur = ""
		}
		if m := Marks(s); m != "" {
			hs.Class += " err"
			hs.Mark = m
			hs.Msg = s.ErrorMessage()
		}
		hs.Diff = pageChanges(s.Diff())
		hs.Tried = pageChanges(s.Attempted())
		if by, why := RefusedBy(s); by != "" {
			hs.Msg = by
			if why != "" {
				hs.Msg += ": " + why
			}
		}
		if link != nil {
			hs.Link = link(n, s)
		}
		h.Spans = append(h.Spans, hs)
	}
	for _, c := range n.Children {
		h.Children = append(h.Children, PageTree(c, link))
	}
	return h
}

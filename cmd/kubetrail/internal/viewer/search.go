package viewer

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
	"github.com/kubetrail/kubetrail/internal/model"
)

// searchPage is the change feed and its form.
type searchPage struct {
	Title string
	// Form holds the filters as they were given, to fill the form again.
	Form      searchForm
	Verbs     []string
	Searched  bool
	Since     time.Time
	Until     time.Time
	Rows      []searchRow
	Matched   int
	Cut       bool
	SearchCut []string
	Unread    int
	Source    string
}

// searchForm are the search's query parameters, named as the CLI's long flags.
type searchForm struct {
	Object, Namespace, Cluster, User, Verb, Field, Since, Until string
	// AllNamespaces (all-namespaces=true, as -A) overrides Namespace; an empty Namespace is
	// every namespace too.
	AllNamespaces, Errors bool
	Limit                 int
}

type searchRow struct {
	trail.Write
	Link string
	// Actor is the user as the CLI shows it (a service account's name, kubelet/NODE); the full
	// name is the cell's title.
	Actor string
	Verb  string // with the subresource
	More  int    // changed paths the row leaves out
}

// maxRows bounds the feed one page shows.
const maxRows = 1000

// search is the search page: with no parameter the empty form, else the change feed.
func (s *Server) search(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := searchPage{Title: "kubetrail: what changed?", Verbs: trail.WriteVerbs, Source: s.Source.String()}
	p.Form = searchForm{Object: q.Get("object"), Namespace: q.Get("namespace"), Cluster: q.Get("cluster"), User: q.Get("user"),
		Verb: q.Get("verb"), Field: q.Get("field"), Since: q.Get("since"), Until: q.Get("until"),
		AllNamespaces: boolParam(q, "all-namespaces"), Errors: boolParam(q, "errors")}
	if !q.Has("cluster") {
		p.Form.Cluster = s.Cluster
	}
	if len(q) == 0 {
		p.Form.Limit = 200
		s.render(w, http.StatusOK, "search.html", p)
		return
	}
	cq, err := s.changeQuery(q, &p)
	if err != nil {
		s.fail(w, http.StatusBadRequest, "reading the search", err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	res, err := trail.Changes(ctx, s.Source, cq)
	if err != nil {
		s.fail(w, http.StatusBadGateway, "searching "+s.Source.String(), err)
		return
	}
	p.Searched, p.Since, p.Until, p.Matched, p.SearchCut, p.Unread = true, cq.Since, cq.Until, res.Matched, res.SearchCut, res.Unread
	p.Cut = res.Matched > len(res.Writes)
	for _, wr := range res.Writes {
		row := searchRow{Write: wr, Verb: wr.VerbText(), Actor: model.ShortUser(wr.User)}
		row.Link = objectURL(wr.Kind, wr.Namespace, wr.Name, wr.UID, wr.Cluster, wr.End, cq.Since, cq.Until, "w-"+wr.SpanID)
		if len(row.Changes) > 3 {
			row.More = wr.ChangedPaths - 3
			row.Changes = row.Changes[:3]
		} else if wr.ChangedPaths > len(wr.Changes) {
			row.More = wr.ChangedPaths - len(wr.Changes)
		}
		p.Rows = append(p.Rows, row)
	}
	s.render(w, http.StatusOK, "search.html", p)
}

// changeQuery reads the search's parameters as `kubetrail changes` reads its flags.
func (s *Server) changeQuery(q url.Values, p *searchPage) (trail.ChangeQuery, error) {
	now := s.now()
	cq := trail.ChangeQuery{User: p.Form.User, Errors: p.Form.Errors, Cluster: p.Form.Cluster, Window: s.Window}
	var err error
	if cq.Limit, err = intParam(q, "limit", 200, 1, maxRows); err != nil {
		return cq, err
	}
	p.Form.Limit = cq.Limit
	if o := strings.TrimSpace(p.Form.Object); o != "" {
		typ, name, _ := strings.Cut(o, "/")
		if typ == "" || strings.Contains(name, "/") {
			return cq, badf("object %q: want TYPE or TYPE/NAME, e.g. deployments or deploy/web", o)
		}
		k := trail.ResolveKind(typ)
		cq.Kind, cq.Name = k.Kind, name
		if !k.Namespaced {
			p.Form.Namespace = ""
		}
	}
	if !p.Form.AllNamespaces {
		cq.Namespace = strings.TrimSpace(p.Form.Namespace) // empty: every namespace
	}
	if p.Form.Verb != "" && !slices.Contains(trail.WriteVerbs, p.Form.Verb) {
		return cq, badf("verb %q: want one of %s", p.Form.Verb, strings.Join(trail.WriteVerbs, ", "))
	}
	cq.Verb = p.Form.Verb
	if f := strings.TrimSpace(p.Form.Field); f != "" {
		if cq.Field, err = trail.ParseFieldPath(f); err != nil {
			return cq, badf("field: %v", err)
		}
	}
	if cq.Since, err = s.timeParam(q, "since", now); err != nil {
		return cq, err
	}
	if cq.Since.IsZero() && s.DefaultSince > 0 {
		cq.Since = now.Add(-s.DefaultSince)
	}
	if cq.Until, err = s.timeParam(q, "until", now); err != nil {
		return cq, err
	}
	if !cq.Since.IsZero() && !cq.Until.IsZero() && !cq.Until.After(cq.Since) {
		return cq, badf("until is not after since")
	}
	return cq, nil
}

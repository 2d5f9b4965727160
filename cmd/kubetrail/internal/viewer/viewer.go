// Package viewer is `kubetrail serve`: a read-only web viewer over the sources `kubetrail trace`
// reads. A search page lists the writes across objects (the change feed, its filters a form whose
// query parameters are named as the CLI's long flags); an object page shows an object's story
// merged across windows (the tree, a timeline, the "why is it slow" summary), each write's whole
// diff, and the object's manifest after any write. Every view is a URL.
//
// Span data is attacker-controlled (a user name, an annotation, a field value): every string
// reaches the page through html/template's contextual escaping, the pages carry no inline
// script or style, and the Content-Security-Policy allows only this server's own script and
// style sheet. Nothing is fetched from elsewhere: the assets are embedded.
package viewer

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
)

//go:embed assets
var assets embed.FS

// contentSecurityPolicy lets the pages load this server's style sheet and script and nothing
// else: no inline script or style, no other origin, no frames, forms only to this server.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'none'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// requestTimeout bounds the backend's work for one page.
const requestTimeout = 60 * time.Second

// DefaultMaxConcurrent is how many pages the viewer builds at once; more wait for a slot, at
// most their request's timeout.
const DefaultMaxConcurrent = 4

// Server serves the viewer.
type Server struct {
	Source trail.Source
	// Cluster is the default of the cluster filter and of the objects' cluster (the collector's
	// cluster setting, --cluster); Window the collector's window.
	Cluster string
	Window  time.Duration
	// DefaultSince is how far back the search looks without since= (0: everything, as for a
	// file).
	DefaultSince time.Duration
	// JaegerUI is the base URL of Jaeger's UI in the links to each window, as the reader's browser
	// reaches it ("": the Jaeger source's own URL; no links for a file).
	JaegerUI string
	// Now is the clock the times of the forms are read against.
	Now func() time.Time
	// Log receives one line per failed request (nil: none).
	Log *log.Logger
	// MaxConcurrent bounds the pages built at once (each may read many traces from the backend
	// and hold them); 0 is DefaultMaxConcurrent. A request waits at most QueueTimeout (0: the
	// request timeout, 60 s) for its turn.
	MaxConcurrent int
	QueueTimeout  time.Duration

	slots chan struct{}
}

// Handler returns the viewer's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	n := s.MaxConcurrent
	if n <= 0 {
		n = DefaultMaxConcurrent
	}
	s.slots = make(chan struct{}, n)
	mux.HandleFunc("GET /{$}", s.limited(s.search))
	mux.HandleFunc("GET /object", s.limited(s.object))
	mux.HandleFunc("GET /healthz", healthz)
	return headers(mux)
}

// limited lets at most MaxConcurrent pages be built at once: each reads the backend and holds
// what it read. A request that finds no slot within QueueTimeout gets a 503 and the panel.
func (s *Server) limited(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		wait := s.QueueTimeout
		if wait <= 0 {
			wait = requestTimeout
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case s.slots <- struct{}{}:
			defer func() { <-s.slots }()
			h(w, r)
		case <-t.C:
			w.Header().Set("Retry-After", "10")
			s.fail(w, http.StatusServiceUnavailable, "waiting for the viewer", errBusy)
		case <-r.Context().Done():
		}
	}
}

// healthz answers the probes of a Deployment (the chart's viewer.enabled): the server is up. It
// does not ask the backend, whose outage the pages report themselves, so that a Jaeger outage
// does not restart the viewer.
func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

var errBusy = errors.New("the viewer is building as many pages as it may at once; retry shortly")

// headers sets the security headers of every answer.
func headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"clock": func(t time.Time) string { return t.UTC().Format("15:04:05.000") },
	"stamp": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000") },
	"rfc":   func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	"short": func(s string, n int) string {
		if s == "" {
			return "∅"
		}
		r := []rune(s)
		if len(r) <= n {
			return s
		}
		return string(r[:n-1]) + "…"
	},
}).ParseFS(assets, "assets/*.html"))

// render writes a page, or the error panel when the template fails before anything was sent.
func (s *Server) render(w http.ResponseWriter, code int, name string, data any) {
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, name, data); err != nil {
		s.fail(w, http.StatusInternalServerError, "rendering the page", err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// errorPage is what a failed request shows: a panel saying what failed and what to try, never a
// blank page.
type errorPage struct {
	Title, What, Message, Hint string
}

func (s *Server) fail(w http.ResponseWriter, code int, what string, err error) {
	if s.Log != nil {
		s.Log.Printf("%s: %v", what, err)
	}
	hint := ""
	switch {
	case errors.Is(err, trail.ErrUnreachable):
		code, hint = http.StatusBadGateway, "The backend did not answer: check that it runs and that --source points at it, then reload."
	case errors.Is(err, context.DeadlineExceeded):
		code, hint = http.StatusGatewayTimeout, "The backend took too long: narrow the range (since, until) or the filters."
	case code == http.StatusBadRequest:
		hint = "Fix the value in the form and search again."
	case errors.Is(err, errBusy):
		hint = "Reload in a few seconds."
	}
	var buf bytes.Buffer
	if terr := pages.ExecuteTemplate(&buf, "error.html", errorPage{Title: "kubetrail: " + what, What: what, Message: err.Error(), Hint: hint}); terr != nil {
		http.Error(w, what+": "+err.Error(), code)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// badRequest is a mistake in the query: the form's, named.
type badRequest struct{ error }

func badf(format string, a ...any) error { return badRequest{fmt.Errorf(format, a...)} }

// timeParam reads a time parameter in the CLI's forms; zero when absent.
func (s *Server) timeParam(q url.Values, name string, now time.Time) (time.Time, error) {
	v := strings.TrimSpace(q.Get(name))
	if v == "" {
		return time.Time{}, nil
	}
	t, err := trail.ParseTime(v, now)
	if err != nil {
		return time.Time{}, badf("%s: %v", name, err)
	}
	return t, nil
}

func boolParam(q url.Values, name string) bool {
	v := q.Get(name)
	return v == "on" || v == "true" || v == "1"
}

func intParam(q url.Values, name string, def, lo, hi int) (int, error) {
	v := strings.TrimSpace(q.Get(name))
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, badf("%s %q: want a number from %d to %d", name, v, lo, hi)
	}
	return n, nil
}

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// objectURL is the object page of a write's object, at the write (its manifest and diff shown).
func objectURL(kind, namespace, name, uid, cluster string, at time.Time, since, until time.Time, anchor string) string {
	q := url.Values{"kind": {kind}, "name": {name}}
	if namespace != "" {
		q.Set("namespace", namespace)
	}
	if uid != "" {
		q.Set("uid", uid)
	}
	if cluster != "" {
		q.Set("cluster", cluster)
	}
	if !at.IsZero() {
		q.Set("at", at.UTC().Format(time.RFC3339Nano))
	}
	if !since.IsZero() {
		q.Set("since", since.UTC().Format(time.RFC3339Nano))
	}
	if !until.IsZero() {
		q.Set("until", until.UTC().Format(time.RFC3339Nano))
	}
	u := "/object?" + q.Encode()
	if anchor != "" {
		u += "#" + anchor
	}
	return u
}

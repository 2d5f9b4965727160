package trail

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kubetrail/kubetrail/internal/model"
)

// Generation is one rollout of the tree's root object: the metadata.generation its spec reached
// (docs/span-model.md, Rollouts), from the first span of the root that carried it until the
// next generation's first span. A rollout that was still going on when the next one began is
// cut there: what followed belongs to the later intent.
type Generation struct {
	N     int64     `json:"generation"`
	Start time.Time `json:"start"`
	// End is the next generation's Start; zero for the last generation in range.
	End time.Time `json:"end,omitzero"`
	// Revision is the deployment.kubernetes.io/revision the root carried at this generation, and
	// TemplateHash the pod-template-hash of the ReplicaSet of that revision, when the spans
	// tell them.
	Revision     string `json:"revision,omitempty"`
	TemplateHash string `json:"pod_template_hash,omitempty"`
}

// Generations lists the root's generations in range, oldest first: each value of
// k8s.object.generation its spans carry, from the first span that carried it. A value lower
// than one already seen (a late or retried write) starts nothing. A write whose response tells
// no generation (a scale subresource answers with a Scale) and that comes between the last span
// of one generation and the first of the next is the write that began the next: the
// generation starts there.
func Generations(n *Node) []Generation {
	var gens []Generation
	var began *Span // a write to the spec that told no generation, since the last span that did
	for _, s := range n.Spans {
		g, ok := intAttr(s, model.AttrObjectGeneration)
		if !ok {
			if began == nil && s.IsWrite() && !s.Failed() && s.Str(model.AttrAuditSubresource) != "status" {
				began = s
			}
			continue
		}
		if len(gens) == 0 || g > gens[len(gens)-1].N {
			start := s.Start
			if began != nil {
				start = began.Start
			}
			if len(gens) > 0 {
				gens[len(gens)-1].End = start
			}
			gens = append(gens, Generation{N: g, Start: start})
		}
		began = nil
		if cur := &gens[len(gens)-1]; g == cur.N {
			if r := s.Str(model.AttrObjectRevision); r != "" {
				cur.Revision = r // the controller annotates the revision after the write
			}
		}
	}
	for i := range gens {
		gens[i].TemplateHash = templateHash(n, gens[i].Revision)
	}
	return gens
}

// templateHash is the pod-template-hash of the root's ReplicaSet of the given revision.
func templateHash(n *Node, revision string) string {
	if revision == "" {
		return ""
	}
	for _, c := range n.Children {
		for _, s := range c.Spans {
			if s.Str(model.AttrObjectRevision) == revision {
				if h := s.Str(model.AttrObjectTemplateHash); h != "" {
					return h
				}
			}
		}
	}
	return ""
}

func intAttr(s *Span, key string) (int64, bool) {
	switch v := s.Attrs[key].(type) {
	case int64:
		return v, true
	case float64:
		return int64(v), true
	case string: // a backend that turned it into a string
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	return 0, false
}

// FindGeneration returns generation n of gens, or an error that lists the generations in range.
func FindGeneration(gens []Generation, n int64, what string) (Generation, error) {
	var seen []string
	for _, g := range gens {
		if g.N == n {
			return g, nil
		}
		seen = append(seen, strconv.FormatInt(g.N, 10))
	}
	if len(seen) == 0 {
		return Generation{}, fmt.Errorf("%w: %s: no span in range carries k8s.object.generation (only objects with a spec have generations, and only writes audited with a body tell it): drop --generation or widen --since", ErrNoSpans, what)
	}
	return Generation{}, fmt.Errorf("%w: %s has no generation %d in range; generations in range: %s (widen --since for earlier ones)", ErrNoSpans, what, n, strings.Join(seen, ", "))
}

// Filter narrows f to the generation's time: from its first span until the next generation's.
func (g Generation) Filter(f Filter) Filter {
	if f.Since.IsZero() || g.Start.After(f.Since) {
		f.Since = g.Start
	}
	if !g.End.IsZero() {
		if end := g.End.Add(-time.Nanosecond); f.Until.IsZero() || end.Before(f.Until) {
			f.Until = end
		}
	}
	return f
}

// Label names the generation: "generation 3 (revision 2, pod-template-hash 65b6865b5c)".
func (g Generation) Label() string {
	var parts []string
	if g.Revision != "" {
		parts = append(parts, "revision "+g.Revision)
	}
	if g.TemplateHash != "" {
		parts = append(parts, "pod-template-hash "+g.TemplateHash)
	}
	l := "generation " + strconv.FormatInt(g.N, 10)
	if len(parts) > 0 {
		l += " (" + strings.Join(parts, ", ") + ")"
	}
	return l
}

// byGeneration splits acts (in time order) into the generations' time ranges.
func byGeneration(acts []Activity, gens []Generation) [][]Activity {
	out := make([][]Activity, len(gens))
	for _, a := range acts {
		i := sort.Search(len(gens), func(i int) bool { return gens[i].Start.After(a.Span.Start) }) - 1
		if i >= 0 && (gens[i].End.IsZero() || a.Span.Start.Before(gens[i].End)) {
			out[i] = append(out[i], a)
		}
	}
	return out
}

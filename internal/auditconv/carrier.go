package auditconv

import (
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.uber.org/zap"

	"github.com/kubetrail/kubetrail/internal/model"
)

// The trace contexts an object's annotations carry (trace_context_annotations): KEP-5915's
// tracing.k8s.io/traceparent and tracestate, their indexed forms .0 to .7, and the older
// trace.kubernetes.io/context. Each becomes a link of the write's audit span, in the keys'
// order; the processor places a root object's window in the first.

// maxIndexed is how many indexed forms of a key are read (K.0 to K.7); a higher index is not a
// trace-context annotation.
const maxIndexed = 8

// maxContextLinks bounds the links one audit span gets from annotations; more are counted
// (reason too_many) and left out.
const maxContextLinks = 8

// Reasons, beside model.Traceparent*, that a trace-context annotation is left out.
const (
	contextTooMany    = "too_many"   // more than maxContextLinks contexts on one object
	contextTracestate = "tracestate" // a tracestate that is not one: the link is made without it
)

// contextKeys matches annotation keys against trace_context_annotations.
type contextKeys struct {
	parents []string
	states  []string // the tracestate key of parents[i], "" for none
}

func newContextKeys(keys []string) *contextKeys {
	k := &contextKeys{parents: keys, states: make([]string, len(keys))}
	for i, p := range keys {
		k.states[i] = model.TracestateKeyOf(p)
	}
	return k
}

// match says which context an annotation key carries: the key's position in
// trace_context_annotations, its index (-1 for the key itself), and whether it is the
// tracestate. Most annotations match no key's prefix and cost a comparison per key.
func (k *contextKeys) match(key []byte) (pos, index int, state, ok bool) {
	if k == nil {
		return 0, 0, false, false
	}
	for i, p := range k.parents {
		if index, ok := keyIndex(key, p); ok {
			return i, index, false, true
		}
		if s := k.states[i]; s != "" {
			if index, ok := keyIndex(key, s); ok {
				return i, index, true, true
			}
		}
	}
	return 0, 0, false, false
}

// keyIndex says whether key is name (-1) or name.N with N a single digit below maxIndexed.
func keyIndex(key []byte, name string) (int, bool) {
	if len(key) < len(name) || string(key[:len(name)]) != name {
		return 0, false
	}
	switch rest := key[len(name):]; {
	case len(rest) == 0:
		return -1, true
	case len(rest) == 2 && rest[0] == '.' && rest[1] >= '0' && rest[1] < '0'+maxIndexed:
		return int(rest[1] - '0'), true
	}
	return 0, false
}

// carried is one trace context of an object's annotations, unparsed.
type carried struct {
	pos, index    int8 // as contextKeys.match says
	parent, state string
}

// carriedList is a body's trace contexts, ordered by key position then index (-1 first): the
// order of their links. A duplicate key replaces the value it repeats (the last one counts, as
// in a map).
type carriedList []carried

func (l carriedList) set(pos, index int, state bool, v string) carriedList {
	i := 0
	for ; i < len(l); i++ {
		c := &l[i]
		if int(c.pos) == pos && int(c.index) == index {
			if state {
				c.state = v
			} else {
				c.parent = v
			}
			return l
		}
		if int(c.pos) > pos || (int(c.pos) == pos && int(c.index) > index) {
			break
		}
	}
	c := carried{pos: int8(pos), index: int8(index)}
	if state {
		c.state = v
	} else {
		c.parent = v
	}
	l = append(l, carried{})
	copy(l[i+1:], l[i:])
	l[i] = c
	return l
}

// linkTraceContexts links the audit span to each trace context the object's annotations carry
// (W3C traceparents, with their tracestate): in the keys' order, a context once however many
// keys repeat it, at most maxContextLinks. A malformed value is counted and ignored; a
// malformed tracestate is counted and its link made without it.
func (c *Converter) linkTraceContexts(span ptrace.Span, contexts carriedList, auditID string, st *Stats) {
	made := 0
	for _, cc := range contexts {
		if cc.parent == "" {
			continue // a tracestate without its traceparent
		}
		tc, reason := model.ParseTraceparent(cc.parent)
		if reason != "" {
			st.badContext(reason)
			v, _ := clipText(cc.parent, maxShortBytes)
			c.logger.Debug("Ignoring a malformed trace-context annotation",
				zap.String("key", c.contextKeyName(cc)), zap.String("reason", reason), zap.String("value", v), zap.String("audit_id", LogAuditID(auditID)))
			continue
		}
		if linked(span, tc) {
			continue
		}
		if made == maxContextLinks {
			st.badContext(contextTooMany)
			continue
		}
		l := span.Links().AppendEmpty()
		l.SetTraceID(tc.TraceID)
		l.SetSpanID(tc.SpanID)
		l.SetFlags(uint32(tc.Flags)) // the W3C trace flags occupy OTLP's low byte
		l.Attributes().PutStr(model.AttrLinkType, model.LinkTypeTraceContext)
		made++
		if cc.state == "" {
			continue
		}
		if !model.ValidTracestate(cc.state) {
			st.badContext(contextTracestate)
			continue
		}
		l.TraceState().FromRaw(cc.state)
	}
}

// linked says whether span already links to tc as a trace context.
func linked(span ptrace.Span, tc model.TraceContext) bool {
	for _, l := range span.Links().All() {
		if l.TraceID() == tc.TraceID && l.SpanID() == tc.SpanID {
			return true
		}
	}
	return false
}

// contextKeyName is the annotation key a context was read from, for logs.
func (c *Converter) contextKeyName(cc carried) string {
	if c.contextKeys == nil || int(cc.pos) >= len(c.contextKeys.parents) {
		return ""
	}
	k := c.contextKeys.parents[cc.pos]
	if cc.index >= 0 {
		k += "." + string(rune('0'+cc.index))
	}
	return k
}

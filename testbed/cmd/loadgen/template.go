package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// microTime is how the apiserver writes requestReceivedTimestamp and stageTimestamp (metav1.MicroTime).
const microTime = "2006-01-02T15:04:05.000000Z07:00"

type tokenKind uint8

const (
	tokID   tokenKind = iota // an auditID or an object UID: replaced wherever it occurs
	tokName                  // an object name: replaced where it is the value of a "name" key
	tokTime                  // a request or stage timestamp: shifted to the present
)

// token is one string of a recorded scenario that every copy replaces.
type token struct {
	kind tokenKind
	orig string
	low  uint64    // tokID in UUID form: its last 12 hex digits
	uuid bool      // tokID: orig is a 36-character UUID
	t    time.Time // tokTime
}

// span is where a token occurs in a batch body: body[off:end] == tokens[tok].orig.
type span struct{ off, end, tok int }

// batch is one recorded webhook body with the positions of every token in it, so that a copy is
// the body's bytes between the positions plus the copy's values: no JSON work per copy.
type batch struct {
	file   string
	body   []byte
	events int
	spans  []span
}

// scenario is the ordered webhook bodies of one recorded scenario. Its batches share one token
// table, so the copy of a later batch names the objects the copy of an earlier one created.
type scenario struct {
	name    string
	tokens  []token
	batches []batch
	latest  time.Time // the latest timestamp of the recording
	events  int
}

// eventList is the part of an audit.k8s.io/v1 EventList the token collection reads.
type eventList struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Items      []struct {
		AuditID   string `json:"auditID"`
		ObjectRef *struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"objectRef"`
		ResponseStatus           any    `json:"responseStatus"`
		RequestObject            any    `json:"requestObject"`
		ResponseObject           any    `json:"responseObject"`
		RequestReceivedTimestamp string `json:"requestReceivedTimestamp"`
		StageTimestamp           string `json:"stageTimestamp"`
	} `json:"items"`
}

// loadScenario reads dir/audit-webhook/*.json in order. metadataOnly strips the request and
// response bodies and sets the level to Metadata, as an apiserver with a Metadata policy sends.
func loadScenario(dir string, metadataOnly bool) (*scenario, error) {
	files, err := filepath.Glob(filepath.Join(dir, "audit-webhook", "*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no audit-webhook/*.json", dir)
	}
	slices.Sort(files)
	s := &scenario{name: filepath.Base(dir)}
	index := map[string]int{}
	add := func(kind tokenKind, v string) error {
		if v == "" {
			return nil
		}
		// A timestamp and an ID or name never share text, but a name and a UID could; the ID
		// rule (replace everywhere) then wins, which rewrites the name too.
		if i, ok := index[v]; ok {
			if kind == tokID && s.tokens[i].kind == tokName {
				s.tokens[i].kind = tokID
				s.tokens[i].low, s.tokens[i].uuid = uuidLow(v)
			}
			return nil
		}
		tk := token{kind: kind, orig: v}
		switch kind {
		case tokID:
			tk.low, tk.uuid = uuidLow(v)
		case tokTime:
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return fmt.Errorf("timestamp %q: %w", v, err)
			}
			tk.t = t
			if t.After(s.latest) {
				s.latest = t
			}
		}
		index[v] = len(s.tokens)
		s.tokens = append(s.tokens, tk)
		return nil
	}
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if metadataOnly {
			if body, err = stripBodies(body); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
		}
		var list eventList
		if err := json.Unmarshal(body, &list); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if list.Kind != "EventList" || list.APIVersion != "audit.k8s.io/v1" {
			return nil, fmt.Errorf("%s: not an audit.k8s.io/v1 EventList", f)
		}
		for _, it := range list.Items {
			errs := []error{
				add(tokID, it.AuditID),
				add(tokTime, it.RequestReceivedTimestamp),
				add(tokTime, it.StageTimestamp),
			}
			if it.ObjectRef != nil {
				errs = append(errs, add(tokID, it.ObjectRef.UID), add(tokName, it.ObjectRef.Name))
			}
			for _, obj := range []any{it.ResponseStatus, it.RequestObject, it.ResponseObject} {
				walkIdentities(obj, func(kind tokenKind, v string) { errs = append(errs, add(kind, v)) })
			}
			for _, err := range errs {
				if err != nil {
					return nil, fmt.Errorf("%s: %w", f, err)
				}
			}
		}
		s.batches = append(s.batches, batch{file: f, body: body, events: len(list.Items)})
		s.events += len(list.Items)
	}
	// Tokens first seen in a later batch may occur in an earlier one (a name in a Status), so
	// positions are found once every token is known.
	for i := range s.batches {
		s.batches[i].spans = findSpans(s.batches[i].body, s.tokens)
	}
	return s, nil
}

// walkIdentities reports the name and UID of every object in a request or response body:
// metadata of the object and of a list's items, ownerReferences, and a Status's details.
func walkIdentities(v any, add func(tokenKind, string)) {
	switch v := v.(type) {
	case map[string]any:
		for _, key := range []string{"metadata", "details"} {
			if m, ok := v[key].(map[string]any); ok {
				name, _ := m["name"].(string)
				uid, _ := m["uid"].(string)
				add(tokName, name)
				add(tokID, uid)
				refs, _ := m["ownerReferences"].([]any)
				for _, r := range refs {
					if r, ok := r.(map[string]any); ok {
						name, _ := r["name"].(string)
						uid, _ := r["uid"].(string)
						add(tokName, name)
						add(tokID, uid)
					}
				}
			}
		}
		for _, c := range v {
			walkIdentities(c, add)
		}
	case []any:
		for _, c := range v {
			walkIdentities(c, add)
		}
	}
}

// stripBodies removes requestObject and responseObject from every event and sets its level to
// Metadata.
func stripBodies(body []byte) ([]byte, error) {
	var list struct {
		Kind       string                       `json:"kind"`
		APIVersion string                       `json:"apiVersion"`
		Metadata   json.RawMessage              `json:"metadata"`
		Items      []map[string]json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, err
	}
	for _, it := range list.Items {
		delete(it, "requestObject")
		delete(it, "responseObject")
		it["level"] = json.RawMessage(`"Metadata"`)
	}
	return json.Marshal(list)
}

// findSpans locates every token in body: IDs anywhere (a UID also sits in delete preconditions and
// Status details), timestamps as whole JSON strings, names as whole JSON strings that are the
// value of a "name" key (a label or an image that equals a name stays as it is).
func findSpans(body []byte, tokens []token) []span {
	var spans []span
	for i, tk := range tokens {
		needle := []byte(tk.orig)
		if tk.kind != tokID {
			needle = []byte(strconv.Quote(tk.orig))
		}
		for from := 0; ; {
			j := bytes.Index(body[from:], needle)
			if j < 0 {
				break
			}
			off := from + j
			from = off + len(needle)
			if tk.kind != tokID {
				off++ // inside the quotes
				if tk.kind == tokName && !afterNameKey(body, off-1) {
					continue
				}
			}
			spans = append(spans, span{off: off, end: off + len(tk.orig), tok: i})
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return a.off - b.off })
	out := spans[:0]
	for _, sp := range spans {
		if len(out) > 0 && sp.off < out[len(out)-1].end {
			continue // inside an earlier token (a UID within a name): that token's rewrite covers it
		}
		out = append(out, sp)
	}
	return out
}

// afterNameKey reports whether the JSON string starting at body[quote] is the value of a "name" key.
func afterNameKey(body []byte, quote int) bool {
	i := quote - 1
	for i >= 0 && (body[i] == ' ' || body[i] == '\n' || body[i] == '\t' || body[i] == '\r') {
		i--
	}
	if i < 0 || body[i] != ':' {
		return false
	}
	i--
	for i >= 0 && (body[i] == ' ' || body[i] == '\n' || body[i] == '\t' || body[i] == '\r') {
		i--
	}
	return bytes.HasSuffix(body[:i+1], []byte(`"name"`))
}

// uuidLow returns the last 12 hex digits of a canonical UUID.
func uuidLow(s string) (uint64, bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return 0, false
	}
	v, err := strconv.ParseUint(s[24:], 16, 64)
	return v, err == nil
}

// copyTag identifies one copy of a run: nonce tells runs apart, n copies within a run.
type copyTag struct {
	nonce uint8
	n     uint64
}

// values returns what each token becomes in copy c, whose timestamps are shifted so that the
// recording's latest one is now. A UUID keeps its form and gets new last 12 hex digits: the
// original's XOR (nonce, n+1), which differs from the original and from every other copy's
// (n < 2^40); names get the suffix -lg<nonce><n>.
func (s *scenario) values(c copyTag, now time.Time) []string {
	vals := make([]string, len(s.tokens))
	shift := now.Sub(s.latest)
	suffix := fmt.Sprintf("-lg%02x%x", c.nonce, c.n)
	mask := uint64(c.nonce)<<40 | (c.n+1)&(1<<40-1)
	for i, tk := range s.tokens {
		switch tk.kind {
		case tokID:
			if tk.uuid {
				vals[i] = fmt.Sprintf("%s%012x", tk.orig[:24], tk.low^mask)
			} else {
				vals[i] = tk.orig + suffix
			}
		case tokName:
			vals[i] = tk.orig + suffix
		case tokTime:
			vals[i] = tk.t.Add(shift).UTC().Format(microTime)
		}
	}
	return vals
}

// render appends batch b of a copy with token values vals to dst.
func (b *batch) render(dst []byte, vals []string) []byte {
	last := 0
	for _, sp := range b.spans {
		dst = append(dst, b.body[last:sp.off]...)
		dst = append(dst, vals[sp.tok]...)
		last = sp.end
	}
	return append(dst, b.body[last:]...)
}

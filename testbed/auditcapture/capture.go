// Package auditcapture turns recorded audit webhook bodies (audit.k8s.io/v1 EventLists a real
// kube-apiserver POSTed) into any number of distinct copies, for load generators and tests.
//
// A capture is the bodies of a recorded scenario (testbed/fixtures/<scenario>/audit-webhook/*.json)
// or of a JSON-lines file (one EventList per line, optionally gzipped), in order. The strings a copy
// replaces are found once per capture by decoding it; a copy is then only byte copies between
// their positions, so generating load costs almost nothing next to what it measures.
//
// Two ways to copy:
//   - Replay: only the auditIDs change, each to a string of the same length. The objects, names and
//     bodies are the recorded ones, so every copy is the same workload over the same objects, and a
//     copy has exactly the recording's byte length.
//   - Fresh: every auditID, every object UID (objectRef, metadata and ownerReferences of the bodies,
//     Status details) and every object name (the value of each "name" key equal to one) changes, so
//     each copy is a new set of objects: new object spans, nothing a cache has seen.
//
// In both, the request and stage timestamps are shifted so that the recording's latest one falls on
// the time the caller passes, keeping their text layout (the processor's records expire relative to
// the window the timestamps fall in).
package auditcapture

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Mode says which identities a copy rewrites.
type Mode uint8

const (
	// Fresh rewrites auditIDs, object UIDs and object names: every copy is a new set of objects.
	Fresh Mode = iota
	// Replay rewrites only auditIDs, keeping their length: every copy is the same objects again.
	Replay
)

// ParseMode reads "fresh" or "replay".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "fresh":
		return Fresh, nil
	case "replay":
		return Replay, nil
	}
	return 0, fmt.Errorf("workload %q: want replay or fresh", s)
}

func (m Mode) String() string {
	if m == Replay {
		return "replay"
	}
	return "fresh"
}

type tokenKind uint8

const (
	tokID    tokenKind = iota // an object UID: replaced wherever it occurs (Fresh)
	tokAudit                  // an auditID: replaced wherever it occurs, same length (both modes)
	tokName                   // an object name: replaced where it is the value of a "name" key (Fresh)
	tokTime                   // a request or stage timestamp: shifted (both modes)
)

// token is one string of a capture that copies may replace.
type token struct {
	kind   tokenKind
	orig   string
	low    uint64    // tokID in UUID form: its last 12 hex digits
	uuid   bool      // tokID: orig is a 36-character UUID
	t      time.Time // tokTime
	layout string    // tokTime: orig's layout, so that a shifted time keeps its length
}

// span is where a token occurs in a batch body: body[off:end] == tokens[tok].orig.
type span struct{ off, end, tok int }

// Batch is one recorded webhook body with the positions of every token in it.
type Batch struct {
	Source string // file (and line) it was read from
	Body   []byte
	Events int
	spans  []span
	traced []int // the tokens of the auditIDs of the events Traced reports
}

// Capture is the ordered webhook bodies of a recording. Its batches share one token table, so the
// copy of a later batch names the objects the copy of an earlier one created.
type Capture struct {
	Name    string
	Batches []Batch
	Events  int
	Bytes   int
	tokens  []token
	latest  time.Time // the latest timestamp of the recording
	index   map[string]int
}

// EventList is the part of an audit.k8s.io/v1 EventList this package (and its users' checks) read.
type EventList struct {
	Kind       string  `json:"kind"`
	APIVersion string  `json:"apiVersion"`
	Items      []Event `json:"items"`
}

// Event is the part of an audit event this package reads.
type Event struct {
	AuditID   string `json:"auditID"`
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	ObjectRef *struct {
		Resource string `json:"resource"`
		APIGroup string `json:"apiGroup"`
		Name     string `json:"name"`
		UID      string `json:"uid"`
	} `json:"objectRef"`
	ResponseStatus           any    `json:"responseStatus"`
	RequestObject            any    `json:"requestObject"`
	ResponseObject           any    `json:"responseObject"`
	RequestReceivedTimestamp string `json:"requestReceivedTimestamp"`
	StageTimestamp           string `json:"stageTimestamp"`
}

// Load reads the bodies of every path in order into one capture: a path is a recorded scenario
// directory (its audit-webhook/*.json) or a JSON-lines file of EventLists (".gz" decompressed).
// metadataOnly strips the request and response bodies and sets the level to Metadata, as an
// apiserver with a Metadata policy sends.
func Load(metadataOnly bool, paths ...string) (*Capture, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("no capture given")
	}
	c := &Capture{index: map[string]int{}}
	var names []string
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		names = append(names, strings.TrimSuffix(strings.TrimSuffix(filepath.Base(p), ".gz"), ".jsonl"))
		if fi.IsDir() {
			err = c.addDir(p, metadataOnly)
		} else {
			err = c.addJSONLines(p, metadataOnly)
		}
		if err != nil {
			return nil, err
		}
	}
	c.Name = strings.Join(names, "+")
	// Tokens first seen in a later batch may occur in an earlier one (a name in a Status), so
	// positions are found once every token is known.
	for i := range c.Batches {
		c.Batches[i].spans = findSpans(c.Batches[i].Body, c.tokens)
	}
	return c, nil
}

// Rebatch returns the capture with its events, in order, in batches of n (the last may hold
// fewer): an apiserver under load fills its webhook batches (--audit-webhook-batch-max-size, 400
// by default) where the recording's batches are what a quiet one sent. n <= 0 returns c.
func (c *Capture) Rebatch(n int) (*Capture, error) {
	if n <= 0 {
		return c, nil
	}
	out := &Capture{Name: fmt.Sprintf("%s (batches of %d)", c.Name, n), index: map[string]int{}}
	var items []json.RawMessage
	flush := func() error {
		body, err := json.Marshal(struct {
			Kind       string            `json:"kind"`
			APIVersion string            `json:"apiVersion"`
			Items      []json.RawMessage `json:"items"`
		}{"EventList", "audit.k8s.io/v1", items})
		if err != nil {
			return err
		}
		items = items[:0]
		return out.addBody(fmt.Sprintf("batch %d of %d events", len(out.Batches)+1, n), body, false)
	}
	for _, b := range c.Batches {
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(b.Body, &list); err != nil {
			return nil, fmt.Errorf("%s: %w", b.Source, err)
		}
		for _, it := range list.Items {
			if items = append(items, it); len(items) == n {
				if err := flush(); err != nil {
					return nil, err
				}
			}
		}
	}
	if len(items) > 0 {
		if err := flush(); err != nil {
			return nil, err
		}
	}
	for i := range out.Batches {
		out.Batches[i].spans = findSpans(out.Batches[i].Body, out.tokens)
	}
	return out, nil
}

func (c *Capture) addDir(dir string, metadataOnly bool) error {
	files, err := filepath.Glob(filepath.Join(dir, "audit-webhook", "*.json"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("%s: no audit-webhook/*.json", dir)
	}
	slices.Sort(files)
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := c.addBody(f, body, metadataOnly); err != nil {
			return err
		}
	}
	return nil
}

func (c *Capture) addJSONLines(path string, metadataOnly bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		gz, err := gzip.NewReader(f)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		defer gz.Close()
		r = gz
	}
	br := bufio.NewReaderSize(r, 1<<20)
	for line := 1; ; line++ {
		body, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(body)) > 0 {
			if err := c.addBody(fmt.Sprintf("%s:%d", path, line), bytes.TrimRight(body, "\r\n"), metadataOnly); err != nil {
				return err
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if len(c.Batches) == 0 {
		return fmt.Errorf("%s: no EventList", path)
	}
	return nil
}

func (c *Capture) add(kind tokenKind, v string) error {
	if v == "" {
		return nil
	}
	// A timestamp and an ID or name never share text, but a name and a UID could; the ID rule
	// (replace everywhere) then wins, which rewrites the name too.
	if i, ok := c.index[v]; ok {
		if (kind == tokID || kind == tokAudit) && c.tokens[i].kind == tokName {
			c.tokens[i].kind = kind
			c.tokens[i].low, c.tokens[i].uuid = uuidLow(v)
		}
		return nil
	}
	tk := token{kind: kind, orig: v}
	switch kind {
	case tokID, tokAudit:
		tk.low, tk.uuid = uuidLow(v)
	case tokTime:
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return fmt.Errorf("timestamp %q: %w", v, err)
		}
		tk.t, tk.layout = t, layoutOf(v)
		if t.After(c.latest) {
			c.latest = t
		}
	}
	c.index[v] = len(c.tokens)
	c.tokens = append(c.tokens, tk)
	return nil
}

func (c *Capture) addBody(source string, body []byte, metadataOnly bool) error {
	if metadataOnly {
		var err error
		if body, err = stripBodies(body); err != nil {
			return fmt.Errorf("%s: %w", source, err)
		}
	}
	var list EventList
	if err := json.Unmarshal(body, &list); err != nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	if list.Kind != "EventList" || list.APIVersion != "audit.k8s.io/v1" {
		return fmt.Errorf("%s: not an audit.k8s.io/v1 EventList", source)
	}
	for _, it := range list.Items {
		errs := []error{
			c.add(tokAudit, it.AuditID),
			c.add(tokTime, it.RequestReceivedTimestamp),
			c.add(tokTime, it.StageTimestamp),
		}
		if it.ObjectRef != nil {
			errs = append(errs, c.add(tokID, it.ObjectRef.UID), c.add(tokName, it.ObjectRef.Name))
		}
		for _, obj := range []any{it.ResponseStatus, it.RequestObject, it.ResponseObject} {
			walkIdentities(obj, func(kind tokenKind, v string) { errs = append(errs, c.add(kind, v)) })
		}
		for _, err := range errs {
			if err != nil {
				return fmt.Errorf("%s: %w", source, err)
			}
		}
	}
	var traced []int
	for i := range list.Items {
		if Traced(&list.Items[i]) {
			traced = append(traced, c.index[list.Items[i].AuditID])
		}
	}
	c.Batches = append(c.Batches, Batch{Source: source, Body: body, Events: len(list.Items), traced: traced})
	c.Events += len(list.Items)
	c.Bytes += len(body)
	return nil
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
		quoted := tk.kind == tokName || tk.kind == tokTime
		if quoted {
			needle = []byte(strconv.Quote(tk.orig))
		}
		for from := 0; ; {
			j := bytes.Index(body[from:], needle)
			if j < 0 {
				break
			}
			off := from + j
			from = off + len(needle)
			if quoted {
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

// layoutOf returns the time layout of an RFC 3339 timestamp with as many fractional digits as v
// has, so that a shifted time formats to the same length (the apiserver writes microseconds).
func layoutOf(v string) string {
	layout := "2006-01-02T15:04:05"
	if dot := strings.IndexByte(v, '.'); dot >= 0 {
		end := dot + 1
		for end < len(v) && v[end] >= '0' && v[end] <= '9' {
			end++
		}
		layout += "." + strings.Repeat("0", end-dot-1)
	}
	return layout + "Z07:00"
}

// CopyTag identifies one copy: Nonce tells runs apart, N copies within a run (N < 2^40).
type CopyTag struct {
	Nonce uint8
	N     uint64
}

// Values returns what each token becomes in copy c under mode, with timestamps shifted so that
// the recording's latest one is now. A UUID keeps its form and gets new last 12 hex digits: the
// original's XOR (Nonce, N+1), which differs from the original and from every other copy's. Other
// auditIDs keep their length (their last 12 characters, or all if shorter, become hex digits of a
// hash of the original and the copy); other UIDs and names get the suffix -lg<nonce><n>.
func (c *Capture) Values(tag CopyTag, now time.Time, mode Mode) []string {
	vals := make([]string, len(c.tokens))
	shift := now.Sub(c.latest)
	suffix := fmt.Sprintf("-lg%02x%x", tag.Nonce, tag.N)
	mask := uint64(tag.Nonce)<<40 | (tag.N+1)&(1<<40-1)
	for i, tk := range c.tokens {
		switch tk.kind {
		case tokAudit:
			vals[i] = sameLength(tk, mask)
		case tokID:
			switch {
			case mode == Replay:
				vals[i] = tk.orig
			case tk.uuid:
				vals[i] = fmt.Sprintf("%s%012x", tk.orig[:24], tk.low^mask)
			default:
				vals[i] = tk.orig + suffix
			}
		case tokName:
			if mode == Replay {
				vals[i] = tk.orig
			} else {
				vals[i] = tk.orig + suffix
			}
		case tokTime:
			vals[i] = tk.t.Add(shift).In(tk.t.Location()).Format(tk.layout)
		}
	}
	return vals
}

func sameLength(tk token, mask uint64) string {
	if tk.uuid {
		return fmt.Sprintf("%s%012x", tk.orig[:24], tk.low^mask)
	}
	h := fnv.New64a()
	h.Write([]byte(tk.orig))
	n := min(len(tk.orig), 12)
	hex := fmt.Sprintf("%016x", h.Sum64()^mask)
	return tk.orig[:len(tk.orig)-n] + hex[16-n:]
}

// Render appends batch b of a copy with token values vals to dst.
func (b *Batch) Render(dst []byte, vals []string) []byte {
	last := 0
	for _, sp := range b.spans {
		dst = append(dst, b.Body[last:sp.off]...)
		dst = append(dst, vals[sp.tok]...)
		last = sp.end
	}
	return append(dst, b.Body[last:]...)
}

// TracedAuditIDs appends to dst the auditIDs, in a copy with token values vals, of the events of b
// that Traced reports: the audit spans the batch should yield.
func (b *Batch) TracedAuditIDs(dst []string, vals []string) []string {
	for _, tok := range b.traced {
		dst = append(dst, vals[tok])
	}
	return dst
}

// Traced reports whether the k8s_audit receiver's defaults turn ev into a span: a completed write
// (ResponseComplete or Panic) with an auditID on a resource, not a Lease or an Event. Load generators use it to
// know how many audit spans a capture should yield, independently of the receiver's code.
func Traced(ev *Event) bool {
	if ev.Stage != "ResponseComplete" && ev.Stage != "Panic" || ev.ObjectRef == nil || ev.ObjectRef.Resource == "" || ev.AuditID == "" {
		return false
	}
	switch ev.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
	default:
		return false
	}
	r := ev.ObjectRef
	return !(r.Resource == "events" && (r.APIGroup == "" || r.APIGroup == "events.k8s.io")) &&
		!(r.Resource == "leases" && r.APIGroup == "coordination.k8s.io")
}

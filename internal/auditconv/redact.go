package auditconv

import (
	"bytes"
	"cmp"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/kubetrail/kubetrail/internal/auditconv/internal/jsonscan"
)

const (
	redacted = "<redacted>"
	// kubectl apply copies the whole object, Secret values and env values included, into this
	// annotation.
	lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"
	// maxNestedApplied bounds how deep a last-applied annotation inside a last-applied
	// annotation is redacted (kubectl leaves its own annotation out, so one level is all there
	// is); deeper ones are masked whole.
	maxNestedApplied = 2
	// minScrubBytes is the shortest masked value scrubbed from messages: shorter ones ("1",
	// "yes") would mangle every message that happens to contain them, and are no credential.
	minScrubBytes = 4
)

// redactedFields are the top-level fields of a redacted resource whose values are never
// exported. Secrets keep their values in data and stringData; ConfigMaps, when configured, in
// data and binaryData.
var redactedFields = []string{"data", "stringData", "binaryData"}

// carriesCredentials reports whether a resource's bodies carry a credential whatever
// redact_resources says: a TokenReview's spec.token is a bearer token, and a review is a create
// like any other, snapshotted when the audit policy logs its body.
func carriesCredentials(group, resource string) bool {
	return group == "authentication.k8s.io" && resource == "tokenreviews"
}

// A redactor holds the redaction rules of a Converter (redact_resources aside, which decides
// whether a body is redacted whole, see Converter.begin):
//   - in any body, the literal value of an env entry ("env": [{"name", "value"}], at any depth:
//     a Pod's containers, a pod template, a CronJob's job template, a custom resource's) whose
//     name matches redact_env_names, or that has no name (a JSON patch replacing
//     /…/env/3/value does not say whose value it is);
//   - the value of an object annotation (metadata.annotations, a template's included) whose key
//     matches one of redact_annotations;
//   - inside the last-applied-configuration annotation, which kubectl fills with the whole
//     object, the same two, the annotation re-encoded with its values masked.
//
// Keys stay, values go, so a reader sees which entries exist and, through the diff cache's
// tags, which changed.
type redactor struct {
	tags tagger
	env  *regexp.Regexp   // nil: env values are kept
	anns []*regexp.Regexp // annotation keys whose values go

	// Names recur from body to body (every Pod of a Deployment has the same env and
	// annotations): the patterns' answers are kept per name, a bounded number of them.
	envNames, annKeys nameMemo
}

var (
	defaultEnvNames   = regexp.MustCompile(DefaultRedactEnvNames)
	defaultAnnotation = regexp.MustCompile(DefaultRedactAnnotation)
)

// newRedactor compiles the rules of s. Settings.Validate refuses a pattern that does not
// compile; one that reaches here anyway fails closed: it matches every name.
func newRedactor(s Settings) *redactor {
	r := &redactor{tags: newTagger()}
	compile := func(p string) *regexp.Regexp {
		switch p { // compiled once: a regexp is safe for concurrent use
		case DefaultRedactEnvNames:
			return defaultEnvNames
		case DefaultRedactAnnotation:
			return defaultAnnotation
		}
		re, err := regexp.Compile(p)
		if err != nil {
			return regexp.MustCompile(``)
		}
		return re
	}
	if s.RedactEnvNames != "" {
		r.env = compile(s.RedactEnvNames)
	}
	for _, p := range s.RedactAnnotations {
		r.anns = append(r.anns, compile(p))
	}
	return r
}

func (r *redactor) matchEnv(name string) bool {
	return r.env != nil && r.envNames.match(name, r.env.MatchString)
}

func (r *redactor) matchAnnotation(key string) bool {
	if len(r.anns) == 0 {
		return false
	}
	return r.annKeys.match(key, func(k string) bool {
		for _, re := range r.anns {
			if re.MatchString(k) {
				return true
			}
		}
		return false
	})
}

// nameMemo keeps a pattern's answer per name: at most maxMemoNames names of at most
// maxMemoNameBytes each (about 1 MiB), forgotten all at once when full.
type nameMemo struct {
	mu sync.Mutex
	m  map[string]bool
}

const (
	maxMemoNames     = 4096
	maxMemoNameBytes = 256
)

// match returns match(name), from the memo when it holds the name. name may be a view of
// bytes that change after the call: what the memo keeps is a copy.
func (n *nameMemo) match(name string, match func(string) bool) bool {
	if len(name) > maxMemoNameBytes {
		return match(name)
	}
	n.mu.Lock()
	v, ok := n.m[name]
	n.mu.Unlock()
	if ok {
		return v
	}
	v = match(name)
	n.mu.Lock()
	if n.m == nil || len(n.m) >= maxMemoNames {
		n.m = make(map[string]bool, 64)
	}
	n.m[strings.Clone(name)] = v
	n.mu.Unlock()
	return v
}

// needs reports whether a body indexed in place holds a value the rules mask: most bodies hold
// none and are encoded from their index as they are; the others are redacted on a parsed tree
// (lazyBody.check). A redacted resource's body is always redacted on its tree.
func (r *redactor) needs(f *flatBody) bool {
	return len(f.nodes) > 0 && r.flatNeeds(f, 0, false, 0)
}

// flatNeeds walks the objects and arrays under node n as walkTree walks a tree.
func (r *redactor) flatNeeds(f *flatBody, n int, inMetadata bool, depth int) bool {
	nd := &f.nodes[n]
	end := n + int(nd.size)
	switch nd.kind {
	case '[':
		for c := n + 1; c < end; c += int(f.nodes[c].size) {
			if k := f.nodes[c].kind; (k == '{' || k == '[') && r.flatNeeds(f, c, false, depth) {
				return true
			}
		}
	case '{':
		for c := n + 1; c < end; c += int(f.nodes[c].size) {
			k := f.nodes[c].kind
			if k != '{' && k != '[' {
				continue
			}
			key := TextView(f.keyOf(c))
			switch {
			case k == '[' && key == "env":
				if r.flatEnvNeeds(f, c) {
					return true
				}
			case k == '{' && inMetadata && key == "annotations":
				if r.flatAnnotationsNeed(f, c, depth) {
					return true
				}
			case r.flatNeeds(f, c, key == "metadata", depth):
				return true
			}
		}
	}
	return false
}

func (r *redactor) flatEnvNeeds(f *flatBody, list int) bool {
	if r.env == nil {
		return false
	}
	for el, end := list+1, list+int(f.nodes[list].size); el < end; el += int(f.nodes[el].size) {
		if f.nodes[el].kind != '{' {
			continue
		}
		if v := f.member(el, "value"); v < 0 || f.nodes[v].kind == 'n' {
			continue
		}
		name := f.member(el, "name")
		if name < 0 || f.nodes[name].kind != '"' || r.matchEnv(TextView(f.str(name))) {
			return true
		}
	}
	return false
}

func (r *redactor) flatAnnotationsNeed(f *flatBody, obj, depth int) bool {
	for c, end := obj+1, obj+int(f.nodes[obj].size); c < end; c += int(f.nodes[c].size) {
		if f.nodes[c].kind == 'n' {
			continue
		}
		key := TextView(f.keyOf(c))
		if r.matchAnnotation(key) {
			return true
		}
		if key == lastAppliedAnnotation && f.nodes[c].kind == '"' && r.textNeeds(f.str(c), depth+1) {
			return true
		}
	}
	return false
}

// textNeeds reports whether JSON text held in a string (the last-applied annotation) holds a
// value the rules mask.
func (r *redactor) textNeeds(text []byte, depth int) bool {
	if depth > maxNestedApplied {
		return true
	}
	f, ok := flatten(text, getNodes())
	if !ok {
		return false
	}
	need := r.flatNeeds(&f, 0, false, depth)
	putNodes(f.nodes)
	return need
}

// redactTree replaces, in a parsed body, every value the rules name by mask(value), and for a
// redacted resource (whole) the values of its redacted fields, a TokenReview's spec.token and
// the last-applied annotation too. It reports whether it masked anything.
func (r *redactor) redactTree(t jsonscan.Tree, whole bool, mask func(string) string) bool {
	changed := false
	if whole {
		changed = redactResourceValues(t, mask)
	}
	return r.walkTree(t, false, mask, 0) || changed
}

// redactResourceValues masks the values of a redacted resource (redact_resources, a
// TokenReview): its redacted fields, spec.token and the last-applied annotation.
func redactResourceValues(t jsonscan.Tree, mask func(string) string) bool {
	changed := false
	if spec := jsonscan.Child(t, "spec"); spec != nil {
		if v, ok := spec["token"]; ok && v != nil {
			spec["token"], changed = mask(scalarText(v)), true
		}
	}
	for _, f := range redactedFields {
		v, ok := t[f]
		if !ok || v == nil {
			continue
		}
		changed = true
		if m, ok := v.(map[string]any); ok {
			for k, val := range m {
				m[k] = mask(scalarText(val))
			}
			continue
		}
		t[f] = mask(scalarText(v))
	}
	if ann := jsonscan.Child(jsonscan.Child(t, "metadata"), "annotations"); ann != nil {
		if v, ok := ann[lastAppliedAnnotation]; ok {
			ann[lastAppliedAnnotation], changed = mask(scalarText(v)), true
		}
	}
	return changed
}

// walkTree applies the env and annotation rules under v; inMetadata says that v is an object's
// metadata, whose annotations are looked at.
func (r *redactor) walkTree(v any, inMetadata bool, mask func(string) string, depth int) bool {
	changed := false
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			if list, ok := c.([]any); ok && k == "env" {
				changed = r.redactEnv(list, mask) || changed
				continue
			}
			if m, ok := c.(map[string]any); ok && inMetadata && k == "annotations" {
				changed = r.redactAnnotations(m, mask, depth) || changed
				continue
			}
			changed = r.walkTree(c, k == "metadata", mask, depth) || changed
		}
	case []any:
		for _, c := range x {
			changed = r.walkTree(c, false, mask, depth) || changed
		}
	}
	return changed
}

func (r *redactor) redactEnv(list []any, mask func(string) string) bool {
	if r.env == nil {
		return false
	}
	changed := false
	for _, el := range list {
		m, ok := el.(map[string]any)
		if !ok {
			continue
		}
		v, ok := m["value"]
		if !ok || v == nil {
			continue
		}
		if name, ok := m["name"].(string); !ok || r.matchEnv(name) {
			m["value"], changed = mask(scalarText(v)), true
		}
	}
	return changed
}

func (r *redactor) redactAnnotations(m map[string]any, mask func(string) string, depth int) bool {
	changed := false
	for k, v := range m {
		if v == nil {
			continue
		}
		if r.matchAnnotation(k) {
			m[k], changed = mask(scalarText(v)), true
			continue
		}
		s, ok := v.(string)
		if k != lastAppliedAnnotation || !ok {
			continue
		}
		if depth+1 > maxNestedApplied {
			m[k], changed = mask(s), true
			continue
		}
		if t, ok := jsonscan.ParseTree([]byte(s)); ok && r.walkTree(t, false, mask, depth+1) {
			m[k], changed = jsonscan.Marshal(t), true
		}
	}
	return changed
}

func scalarText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return jsonscan.Marshal(v)
}

func maskConstant(string) string { return redacted }

// patchText is a patch body as it is exported (the k8s.audit.patch event, a mutating webhook's
// patch): compact JSON with the values the rules name masked by mask. A redacted resource's
// patch goes through redactPatch. Another's is parsed only when it may hold what the rules
// look for (an env list or an annotation, by name): a merge or strategic-merge patch has the
// object's shape and is redacted like a body; a JSON patch's operations are redacted at the
// place their path names (patchValue).
func (r *redactor) patchText(raw []byte, whole bool, mask func(string) string) string {
	if whole {
		return r.redactPatch(raw, mask)
	}
	if !mayHoldRedacted(raw) {
		return jsonscan.Compact(raw)
	}
	if t, ok := jsonscan.ParseTree(raw); ok {
		if r.redactTree(t, false, mask) {
			return jsonscan.Marshal(t)
		}
		return jsonscan.Compact(raw)
	}
	var ops []any
	if err := jsonscan.UnmarshalNumbers(raw, &ops); err == nil {
		changed := false
		for _, op := range ops {
			m, ok := op.(map[string]any)
			if !ok {
				continue
			}
			if v, ok := m["value"]; ok && v != nil {
				path, _ := m["path"].(string)
				if nv, ok := r.patchValue(path, v, mask); ok {
					m["value"], changed = nv, true
				}
			}
		}
		if changed {
			return jsonscan.Marshal(ops)
		}
	}
	return jsonscan.Compact(raw)
}

// mayHoldRedacted reports whether a patch may hold a value of an env list or an annotation: it
// names one ("env" in a key or a JSON patch path, "annotations" likewise), or it escapes
// characters in its strings, which could spell either.
func mayHoldRedacted(raw []byte) bool {
	s := TextView(raw)
	return strings.Contains(s, "env") || strings.Contains(s, "annotations") || strings.Contains(s, `\u`)
}

// patchValue redacts a JSON patch operation's value as the body at its path would be: the
// value is placed in an object of the path's shape (an array for an index or "-", an object
// member otherwise), the rules walk it, and it is taken back out. A value set at
// /spec/containers/0/env/-, /metadata/annotations/example.com~1token or
// /spec/template/spec/containers/0/env/2/value (a value without its name: masked) is
// masked as in the body it lands in.
func (r *redactor) patchValue(path string, v any, mask func(string) string) (any, bool) {
	var tokens []string
	if rest, ok := strings.CutPrefix(path, "/"); ok {
		tokens = strings.Split(rest, "/")
		for i, t := range tokens {
			tokens[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
		}
	}
	isIndex := func(t string) bool {
		if t == "-" {
			return true
		}
		_, err := strconv.ParseUint(t, 10, 64)
		return err == nil
	}
	root := v
	for i := len(tokens) - 1; i >= 0; i-- {
		if isIndex(tokens[i]) {
			root = []any{root}
		} else {
			root = map[string]any{tokens[i]: root}
		}
	}
	if !r.walkTree(root, false, mask, 0) {
		return v, false
	}
	for _, t := range tokens {
		if isIndex(t) {
			root = root.([]any)[0]
		} else {
			root = root.(map[string]any)[t]
		}
	}
	return root, true
}

// redactPatch redacts a patch body sent to a redacted resource. Merge and strategic-merge
// patches have the object's shape; a JSON patch (an array of operations) may put a secret in
// any "value", so every value goes. The apiserver audits a patch before validating it, so a
// malformed JSON patch is exported too: of an operation only its op, path and from (which
// name keys, never values) are kept as they are, and an element that is not an operation is
// masked whole. Anything unparseable is dropped whole.
func (r *redactor) redactPatch(raw []byte, mask func(string) string) string {
	if t, ok := jsonscan.ParseTree(raw); ok {
		r.redactTree(t, true, mask)
		return jsonscan.Marshal(t)
	}
	var ops []any
	if err := jsonscan.UnmarshalNumbers(raw, &ops); err == nil {
		for i, op := range ops {
			m, ok := op.(map[string]any)
			if !ok {
				ops[i] = mask(scalarText(op))
				continue
			}
			for k, v := range m {
				switch _, isStr := v.(string); {
				case k == "value":
					m[k] = mask(scalarText(v))
				case (k == "op" || k == "path" || k == "from") && isStr:
				default:
					mask(scalarText(v))
					delete(m, k)
				}
			}
		}
		return jsonscan.Marshal(ops)
	}
	mask(string(raw))
	return redacted
}

// credentials returns the values the rules mask in an event's bodies (the request, as a patch
// for a patch, and the response), so that a message echoing one (a validation error, an
// admission webhook's or policy's denial) can be scrubbed of it. Bodies that hold nothing to
// mask are only indexed to find that out.
func (r *redactor) credentials(ev *Event, whole bool) []string {
	var rec recorder
	if hasBody(ev.RequestObject) {
		if ev.Verb == "patch" {
			r.patchText(ev.RequestObject, whole, rec.mask)
		} else {
			r.bodyCredentials(ev.RequestObject, whole, &rec)
		}
	}
	if hasBody(ev.ResponseObject) {
		r.bodyCredentials(ev.ResponseObject, whole, &rec)
	}
	// Longest first: a value that contains another is scrubbed whole.
	slices.SortFunc(rec.vals, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return slices.Compact(rec.vals)
}

func (r *redactor) bodyCredentials(raw []byte, whole bool, rec *recorder) {
	if !whole {
		f, ok := flatten(raw, getNodes())
		need := ok && r.needs(&f)
		putNodes(f.nodes)
		if !need {
			return
		}
	}
	if t, ok := jsonscan.ParseTree(raw); ok {
		r.redactTree(t, whole, rec.mask)
	}
}

// recorder is a mask that keeps what it masks: the value, its base64 decoding (a Secret's data)
// and, for a JSON value (a stringData object a JSON patch sets), its strings.
type recorder struct{ vals []string }

func (c *recorder) mask(s string) string {
	c.add(s, 0)
	return redacted
}

func (c *recorder) add(s string, depth int) {
	if len(s) < minScrubBytes {
		return
	}
	c.vals = append(c.vals, s)
	if b, err := base64.StdEncoding.DecodeString(s); err == nil && len(b) >= minScrubBytes && utf8.Valid(b) {
		c.vals = append(c.vals, string(b))
	}
	if q := strconv.Quote(s); q[1:len(q)-1] != s {
		c.vals = append(c.vals, q[1:len(q)-1]) // as a Go message quotes it (%q)
	}
	if depth < 2 && (s[0] == '{' || s[0] == '[') {
		var v any
		if jsonscan.UnmarshalNumbers([]byte(s), &v) == nil {
			c.leaves(v, depth+1)
		}
	}
}

func (c *recorder) leaves(v any, depth int) {
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			c.leaves(e, depth)
		}
	case []any:
		for _, e := range x {
			c.leaves(e, depth)
		}
	case string:
		c.add(x, depth)
	}
}

// scrub replaces every occurrence of the values in s by the mask.
func scrub(s string, values []string) string {
	for _, v := range values {
		if strings.Contains(s, v) {
			s = strings.ReplaceAll(s, v, redacted)
		}
	}
	return s
}

// tagger masks redacted values for the in-memory diff cache with a keyed hash: two different
// values get different tags, so the diff still reports that a Secret key or an env value
// changed, while the per-process random key makes the tag useless for guessing the value. Tags
// never leave the receiver: untag turns every tag back into the constant mask before export.
type tagger struct{ key []byte }

func newTagger() tagger {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // crypto/rand.Read never fails on supported platforms.
	return tagger{key: key}
}

func (tg tagger) mask(v string) string {
	mac := hmac.New(sha256.New, tg.key)
	mac.Write([]byte(v))
	return "<redacted:" + hex.EncodeToString(mac.Sum(nil)[:8]) + ">"
}

const tagPrefix = "<redacted:"

var tagPattern = regexp.MustCompile(`<redacted:[0-9a-f]{16}>`)

// untag replaces cache tags by the exported mask. Every exported body, diff value and snapshot
// goes through it: any object may hold a tagged env value or annotation.
func untag(s string) string {
	if len(s) < len(redacted) || !strings.Contains(s, tagPrefix) {
		return s
	}
	return tagPattern.ReplaceAllLiteralString(s, redacted)
}

// isMaskAndTag reports whether two string values are the exported mask and a cache tag: a body
// shared through Redis carries the mask where this replica's carries a tag, and the value
// behind both is unknown to the comparison, so it is not a change.
func isMaskAndTag(a, b []byte) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	return string(a) == redacted && len(b) == len(redacted)+17 && bytes.HasPrefix(b, []byte(tagPrefix))
}

package auditconv

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
)

const (
	redacted = "<redacted>"
	// kubectl apply copies the whole object, Secret values included, into this annotation.
	lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"
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

// redactTree replaces every value under the redacted fields, a TokenReview's spec.token, and
// the last-applied annotation, by mask(value); keys stay, so a reader still sees which entries
// exist and which changed.
func redactTree(t tree, mask func(string) string) {
	if spec := child(t, "spec"); spec != nil {
		if v, ok := spec["token"]; ok && v != nil {
			spec["token"] = mask(scalarText(v))
		}
	}
	for _, f := range redactedFields {
		v, ok := t[f]
		if !ok || v == nil {
			continue
		}
		if m, ok := v.(map[string]any); ok {
			for k, val := range m {
				m[k] = mask(scalarText(val))
			}
			continue
		}
		t[f] = mask(scalarText(v))
	}
	if ann := child(child(t, "metadata"), "annotations"); ann != nil {
		if v, ok := ann[lastAppliedAnnotation]; ok {
			ann[lastAppliedAnnotation] = mask(scalarText(v))
		}
	}
}

func scalarText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return marshalJSON(v)
}

func maskConstant(string) string { return redacted }

// redactPatch redacts a patch body sent to a redacted resource. Merge and strategic-merge
// patches have the object's shape; a JSON patch (an array of operations) may put a secret in
// any "value", so every value goes. The apiserver audits a patch before validating it, so a
// malformed JSON patch is exported too: of an operation only its op, path and from (which
// name keys, never values) are kept as they are, and an element that is not an operation is
// masked whole. Anything unparseable is dropped whole.
func redactPatch(raw []byte) string {
	if t, ok := parseTree(raw); ok {
		redactTree(t, maskConstant)
		return marshalJSON(t)
	}
	var ops []any
	if err := jsonUnmarshalNumbers(raw, &ops); err == nil {
		for i, op := range ops {
			m, ok := op.(map[string]any)
			if !ok {
				ops[i] = redacted
				continue
			}
			for k, v := range m {
				switch _, isStr := v.(string); {
				case k == "value":
					m[k] = redacted
				case (k == "op" || k == "path" || k == "from") && isStr:
				default:
					delete(m, k)
				}
			}
		}
		return marshalJSON(ops)
	}
	return redacted
}

// tagger masks redacted values for the in-memory diff cache with a keyed hash: two different
// values get different tags, so the diff still reports that a Secret key changed, while the
// per-process random key makes the tag useless for guessing the value. Tags never leave the
// receiver: untag turns every tag back into the constant mask before export.
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

var tagPattern = regexp.MustCompile(`<redacted:[0-9a-f]{16}>`)

// untag replaces cache tags by the exported mask.
func untag(s string) string {
	if len(s) < len(redacted) {
		return s
	}
	return tagPattern.ReplaceAllLiteralString(s, redacted)
}

package auditconv

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/kubetrail/kubetrail/internal/model"
)

// Every string an audit event hands over is cut at a bound before it becomes a span attribute,
// a span name, a key or a log field (docs/span-model.md, Bounds): the apiserver copies some of
// them from the client (the Audit-ID header, the user agent, the URL, names of objects that do
// not exist), and whoever can post to a door can send any of them at any size. The bounds are
// far above what the apiserver writes for real requests, so recorded traffic is never cut.
const (
	// maxBodyBytes bounds a snapshot or patch attribute; a ConfigMap can hold a megabyte.
	maxBodyBytes = 64 << 10
	// MaxAuditIDBytes bounds an auditID. The apiserver's are UUIDs (36 bytes); a client may set
	// its own through the Audit-ID header. A longer one is cut on the span and is never a key
	// of a duplicate table (DedupAuditID): it cannot flush one.
	MaxAuditIDBytes = 128

	// maxUserBytes bounds user.name, the impersonated user and each group.
	maxUserBytes = 256
	// maxGroups bounds how many groups k8s.audit.user.groups lists.
	maxGroups = 64
	// maxUserAgentBytes bounds user_agent.original (kubectl's is about 60 bytes).
	maxUserAgentBytes = 512
	// maxURLPathBytes bounds url.path: a path of the longest names is under 700 bytes.
	maxURLPathBytes = 1024
	// maxClientAddressBytes bounds client.address (an IPv6 address with a zone is under 64).
	maxClientAddressBytes = 64
	// maxShortBytes bounds the level, resourceVersions and the rollout's revision and hashes:
	// a resourceVersion is an etcd revision, at most 20 digits.
	maxShortBytes = 64
	// maxReasonBytes bounds an error's reason (NotFound, Conflict: a CamelCase word).
	maxReasonBytes = 128
	// maxMessageBytes bounds an error's message and each of its causes; maxCauses how many
	// causes are kept.
	maxMessageBytes = 4 << 10
	maxCauses       = 32
	// maxNameBytes bounds the names of an object's identity (name, namespace, owner name) and a
	// node name. DNS names end at 253 bytes; a path segment name (an RBAC role's) has no bound
	// of its own but the request's size.
	maxNameBytes = model.MaxNameBytes
	// maxTokenBytes bounds the identity's group, version, resource, kind and UID, the owner's
	// kind, apiVersion and UID, the subresource and each webhook's name.
	maxTokenBytes = model.MaxTokenBytes
	// maxWebhooks bounds how many webhook calls k8s.audit.admission.* lists.
	maxWebhooks = 64
	// maxKeyedAttributes bounds how many k8s.audit.pod_security.* and k8s.audit.latency.*
	// attributes a span gets (their names come from annotation keys), and maxKeyNameBytes the
	// name part of each.
	maxKeyedAttributes = 16
	maxKeyNameBytes    = 64
)

// attrTruncatedAttributes lists the attributes whose value the conversion cut at its bound:
// keys of the span, of its Resource (the object's identity) or of its span events.
const attrTruncatedAttributes = "k8s.audit.truncated_attributes"

// DedupAuditID reports whether an auditID may key a table of events already seen (the
// connector's redelivery filter, any other door's): an empty one names no request, and one over
// MaxAuditIDBytes is malformed (the apiserver writes UUIDs), so it is neither looked up nor
// remembered. Its event is converted like any other, its span ID derived from the whole ID.
func DedupAuditID(id string) bool { return id != "" && len(id) <= MaxAuditIDBytes }

// LogAuditID is an auditID as a log line may quote it: cut at MaxAuditIDBytes.
func LogAuditID(id string) string {
	id, _ = clipText(id, MaxAuditIDBytes)
	return id
}

// cuts collects the keys of the attributes an event's span got cut (attrTruncatedAttributes).
// The zero value is ready; it allocates only when something is cut.
type cuts struct{ keys []string }

// text returns s cut to at most n bytes on a character boundary, noting key when it cut.
func (c *cuts) text(key, s string, n int) string {
	if len(s) <= n {
		return s
	}
	s, _ = clipText(s, n)
	c.note(key)
	return s
}

func (c *cuts) note(key string) {
	if c == nil {
		return
	}
	for _, k := range c.keys {
		if k == key {
			return
		}
	}
	c.keys = append(c.keys, key)
}

// put adds attrTruncatedAttributes to attrs when anything was cut.
func (c *cuts) put(attrs pcommon.Map) {
	if len(c.keys) == 0 {
		return
	}
	s := attrs.PutEmptySlice(attrTruncatedAttributes)
	s.EnsureCapacity(len(c.keys))
	for _, k := range c.keys {
		s.AppendEmpty().SetStr(k)
	}
}

// identity returns an identity string (a name, a UID, a resource) of at most n bytes, as
// model.BoundIdentity cuts it (the processor cuts what other doors hand it the same way), and
// notes the cut.
func (c *cuts) identity(key, s string, n int) string {
	if len(s) <= n {
		return s
	}
	c.note(key)
	return model.BoundIdentity(s, n)
}

// boundIdentity cuts the object's identity and owner (cuts.identity). c may be nil (a key
// computed before the span, which must equal the span's).
func (c *cuts) boundIdentity(o *model.Object) {
	o.Name = c.identity(model.AttrObjectName, o.Name, maxNameBytes)
	o.Namespace = c.identity(model.AttrNamespaceName, o.Namespace, maxNameBytes)
	o.UID = c.identity(model.AttrObjectUID, o.UID, maxTokenBytes)
	o.Group = c.identity(model.AttrObjectAPIGroup, o.Group, maxTokenBytes)
	o.Version = c.identity(model.AttrObjectAPIVersion, o.Version, maxTokenBytes)
	o.Resource = c.identity(model.AttrObjectResource, o.Resource, maxTokenBytes)
	o.Kind = c.identity(model.AttrObjectKind, o.Kind, maxTokenBytes)
	o.Owner.Name = c.identity(model.AttrOwnerName, o.Owner.Name, maxNameBytes)
	o.Owner.UID = c.identity(model.AttrOwnerUID, o.Owner.UID, maxTokenBytes)
	o.Owner.Kind = c.identity(model.AttrOwnerKind, o.Owner.Kind, maxTokenBytes)
	o.Owner.APIVersion = c.identity(model.AttrOwnerAPIVersion, o.Owner.APIVersion, maxTokenBytes)
}

// validResource reports whether r is a resource as the apiserver names it: a lower-case plural,
// a DNS-1035 label (what a CustomResourceDefinition's plural must be, and every built-in
// resource is). Redaction matches resources exactly (`secrets` in the core group), so an event
// naming `Secrets` or `secrets/..` is malformed, not an object of another resource whose values
// would leave unredacted.
func validResource(r string) bool {
	if len(r) == 0 || len(r) > 63 || r[0] < 'a' || r[0] > 'z' || r[len(r)-1] == '-' {
		return false
	}
	for i := 1; i < len(r); i++ {
		if c := r[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// validGroup reports whether g is an API group as the apiserver names it: "" (the core group)
// or a lower-case DNS-1123 subdomain.
func validGroup(g string) bool {
	if g == "" {
		return true
	}
	if len(g) > 253 {
		return false
	}
	label := 0 // length of the label so far
	for i := 0; i < len(g); i++ {
		switch c := g[i]; {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			label++
		case c == '-':
			if label == 0 || i == len(g)-1 || g[i+1] == '.' {
				return false
			}
			label++
		case c == '.':
			if label == 0 {
				return false
			}
			label = 0
		default:
			return false
		}
		if label > 63 {
			return false
		}
	}
	return label > 0
}

// clipText cuts valid UTF-8 text to at most n bytes on a character boundary, and says whether it
// did.
func clipText(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	cut := max(n, 0)
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut], true
}

// validText replaces each byte of s that is not part of valid UTF-8 with U+FFFD. Exported
// strings must be UTF-8 (OTLP's protobuf strings are, and a backend may refuse a batch holding
// one that is not), while patch bodies and error messages are bytes as the client sent them.
// It runs before any clip, which cuts on character boundaries of valid text.
func validText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

// clipTo cuts s to at most limit bytes on a character boundary and marks the cut with the
// original length, so that two long strings cut alike still tell their sizes apart.
func clipTo(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

package model

import (
	"crypto/sha256"
	"encoding/hex"
	"unicode/utf8"
)

// Bounds of the identity strings that become ID-map keys and values (docs/span-model.md,
// Bounds): the receivers cut what they emit at these bounds, and k8s_object_link cuts again
// whatever another door hands it, so that no sender makes a record or a key of its choosing
// size.
const (
	// MaxNameBytes bounds an object's name, namespace and owner name, and a node name.
	MaxNameBytes = 512
	// MaxTokenBytes bounds the cluster, API group, version, resource, kind and UID, and the
	// owner's kind, apiVersion and UID.
	MaxTokenBytes = 253
)

// identityCutHash is how many hex digits of the whole value's SHA-256 end a cut identity.
const identityCutHash = 16

// BoundIdentity returns s when it has at most n bytes. A longer one keeps its first bytes (cut
// on a character boundary), then "…" and 16 hex digits of the SHA-256 of the whole value: the
// identity stays the same on every replica and door, and two long names that share their
// beginning stay two objects (a plain cut would merge their traces).
func BoundIdentity(s string, n int) string {
	if len(s) <= n {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	cut := max(n-len("…")-identityCutHash, 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…" + hex.EncodeToString(sum[:identityCutHash/2])
}

// Bounded reports whether every identity string of o is within its bound, and Bound cuts those
// that are not (BoundIdentity). The check is what a span of a kubetrail receiver costs: its
// strings are within their bounds already.
func (o *Object) Bounded() bool {
	return len(o.Cluster) <= MaxTokenBytes && len(o.Name) <= MaxNameBytes && len(o.Namespace) <= MaxNameBytes &&
		len(o.UID) <= MaxTokenBytes && len(o.Group) <= MaxTokenBytes && len(o.Version) <= MaxTokenBytes &&
		len(o.Resource) <= MaxTokenBytes && len(o.Kind) <= MaxTokenBytes &&
		len(o.Owner.Name) <= MaxNameBytes && len(o.Owner.UID) <= MaxTokenBytes &&
		len(o.Owner.Kind) <= MaxTokenBytes && len(o.Owner.APIVersion) <= MaxTokenBytes
}

// Bound cuts each identity string of o, the owner's included, at its bound.
func (o *Object) Bound() {
	if o.Bounded() {
		return
	}
	o.Cluster = BoundIdentity(o.Cluster, MaxTokenBytes)
	o.Name = BoundIdentity(o.Name, MaxNameBytes)
	o.Namespace = BoundIdentity(o.Namespace, MaxNameBytes)
	o.UID = BoundIdentity(o.UID, MaxTokenBytes)
	o.Group = BoundIdentity(o.Group, MaxTokenBytes)
	o.Version = BoundIdentity(o.Version, MaxTokenBytes)
	o.Resource = BoundIdentity(o.Resource, MaxTokenBytes)
	o.Kind = BoundIdentity(o.Kind, MaxTokenBytes)
	o.Owner.Name = BoundIdentity(o.Owner.Name, MaxNameBytes)
	o.Owner.UID = BoundIdentity(o.Owner.UID, MaxTokenBytes)
	o.Owner.Kind = BoundIdentity(o.Owner.Kind, MaxTokenBytes)
	o.Owner.APIVersion = BoundIdentity(o.Owner.APIVersion, MaxTokenBytes)
}

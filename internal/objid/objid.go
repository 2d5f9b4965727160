// Package objid derives the IDs of an object's window (its per-object trace and its object span)
// and reads and writes the trace-state member that names an object, with the standard library
// only: the processor (through internal/model) and pkg/objecttrace, which controller authors
// import without any collector module, share one derivation.
package objid

import (
	"crypto/sha256"
	"encoding/binary"
	"time"
)

// Domain tags of the object derivations (docs/design.md, IDs).
const (
	domainObjectSpan  = "kubetrail/object-span/v1\x00"
	domainObjectTrace = "kubetrail/object-trace/v1\x00"
)

// UIDKey is the key of the object with the given UID in the given cluster (model.UIDKey).
func UIDKey(cluster, uid string) string {
	return cluster + "/uid/" + uid
}

// WindowStart returns the start of the window of the given size that contains t; windows are
// aligned to the Unix epoch. A non-positive size is 30 minutes.
func WindowStart(t time.Time, size time.Duration) time.Time {
	if size <= 0 {
		size = 30 * time.Minute
	}
	ns := t.UnixNano()
	start := ns - ns%int64(size)
	if ns < 0 && ns%int64(size) != 0 {
		start -= int64(size)
	}
	return time.Unix(0, start).UTC()
}

// ObjectSpanID is the span ID of the object span of key in the window starting at window.
func ObjectSpanID(key string, window time.Time) [8]byte {
	sum := hashKeyWindow(domainObjectSpan, key, window)
	var id [8]byte
	copy(id[:], sum[:8])
	if id == ([8]byte{}) {
		id[7] = 1
	}
	return id
}

// ObjectTraceID is the per-object trace ID of key in the window starting at window.
func ObjectTraceID(key string, window time.Time) [16]byte {
	sum := hashKeyWindow(domainObjectTrace, key, window)
	var id [16]byte
	copy(id[:], sum[:16])
	if id == ([16]byte{}) {
		id[15] = 1
	}
	return id
}

func hashKeyWindow(domain, key string, window time.Time) [32]byte {
	var buf [256]byte
	b := append(buf[:0], domain...)
	b = append(b, key...)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint64(b, uint64(window.UnixNano()))
	return sha256.Sum256(b)
}

// Package idmap is the k8s_object_link processor's ID map: the records that place every object
// in its window's trace (assignments, owner relations, the name index, duplicate marks, span
// counts), in process memory or shared by replicas through Redis, where the first writer of a
// record wins so that replicas never split a trace.
//
// The processor decides what the records mean; this package keeps them: bounded in memory,
// pipelined to Redis, carried through a Redis outage and written back after Redis lost them.
package idmap

import (
	"context"
	"encoding/binary"
	"errors"
	"strconv"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/kubetrail/kubetrail/internal/model"
)

// The ID map is a small batch interface: the processor collects everything one batch of spans
// needs (look-ups and first-writer-wins writes), hands it to the store in one call, and the
// Redis store turns that call into one pipelined round trip. Nothing Redis-shaped leaks into the
// processor, and the memory store is the same contract without the network.

// OpKind says what one Op does.
type OpKind uint8

const (
	// OpGet reads a record.
	OpGet OpKind = iota
	// OpSetIfAbsent writes a record unless one exists; either way Value ends up holding the
	// record's value after the call (first writer wins) and Found says whether it already existed.
	OpSetIfAbsent
	// OpSet writes a record unconditionally (relations and the name index: last sight wins).
	OpSet
	// OpDelete removes a record (undoing dedup marks of a batch the next consumer refused).
	OpDelete
	// OpIncr adds Value (a decimal number) to a counter record, creating it with ExpireAt when
	// absent; Value then holds the counter's new total.
	OpIncr
)

// Op is one record operation of a batch.
type Op struct {
	Kind     OpKind
	Key      string    // prefix-free; backends add their own prefix
	Value    string    // written value; after Get/SetIfAbsent, the stored value
	ExpireAt time.Time // absolute expiry, so every replica agrees on it; on a Get, how long a cache may keep the answer
	Found    bool      // Get: the record exists; SetIfAbsent: it existed before (we lost)
}

// Store is the ID map. Do executes a batch of operations; each op's results are written back in
// place. A store never fails a batch because a remote backend is unavailable: it degrades to
// its memory and reports the outage through componentstatus instead, so no span is dropped
// because of the ID map. Do is safe for concurrent use.
//
// Local answers Get operations from process memory only (no network) and reports whether those
// answers are authoritative (true for the memory backend; for Redis a miss may still exist
// remotely). The processor uses it to settle everything the cache knows before it decides
// which writes can go out in the single remote round trip.
type Store interface {
	Do(ctx context.Context, ops []Op) error
	Local(ops []Op) (authoritative bool)
	Close(ctx context.Context) error
}

// ErrClosed is what a closed store answers.
var ErrClosed = errors.New("id map closed")

// Record keys. One letter per record type keeps keys short in Redis and in memory. The stores
// treat some records apart (duplicate, graft and continuation marks in memory, the name index and
// the records written back after a loss in Redis), so those letters are this package's; the
// processor adds records of its own under other letters (j: apiserver joins, k: linked traces,
// t: trace contexts), which the stores keep like any other.

// AssignmentKey is the record of an object's assignment in one window.
func AssignmentKey(key model.Key, window time.Time) string {
	return "a:" + string(key) + "@" + strconv.FormatInt(window.Unix(), 36)
}

// RelationKey is the record of an object's owner (EncodeOwner).
func RelationKey(key model.Key) string { return "r:" + string(key) }

// NameKey is the name index's record of the UID an object name had when last seen.
func NameKey(nameKey string) string { return "n:" + nameKey }

// DedupKey is the duplicate mark of an activity span.
func DedupKey(id pcommon.SpanID) string { return "d:" + string(id[:]) }

// GraftTraceKey and GraftSpanKey are the graft marks of an object's derived trace and of its
// object span (the processor's trace contexts: a context that names a marked ID never nests).
// Like duplicate marks they carry no value, one or two per assignment, so the memory store keeps
// them apart from its LRU too.
func GraftTraceKey(id pcommon.TraceID) string { return "g:" + string(id[:]) }

// GraftSpanKey is the graft mark of an object span (see GraftTraceKey).
func GraftSpanKey(id pcommon.SpanID) string { return "g:" + string(id[:]) }

// ContinuationKey is the mark that a continuation span (an object's span in a continuation trace
// of max_spans_per_trace) was emitted, by the replica that set it first. It lives for the
// window's records (window + grace), not duplicate_ttl, so the memory store keeps it in a set of
// its own: in the duplicate marks' generations it would keep them alive past their TTL.
func ContinuationKey(id pcommon.SpanID) string { return "e:" + string(id[:]) }

// SpanCountKey is the counter of the spans put in a trace (max_spans_per_trace).
func SpanCountKey(id pcommon.TraceID) string { return "c:" + string(id[:]) }

// Assignment is an object's place in one window: the trace it joins (its root ancestor's), its
// own object span ID and its parent (the owner's object span, empty for a root).
type Assignment struct {
	TraceID pcommon.TraceID
	SpanID  pcommon.SpanID
	Parent  pcommon.SpanID
}

const assignmentSize = 32

// Encode is 32 raw bytes: values stay compact in Redis and in memory.
func (a Assignment) Encode() string {
	var b [assignmentSize]byte
	copy(b[0:16], a.TraceID[:])
	copy(b[16:24], a.SpanID[:])
	copy(b[24:32], a.Parent[:])
	return string(b[:])
}

// DecodeAssignment reads an assignment record; false for a malformed one.
func DecodeAssignment(s string) (Assignment, bool) {
	var a Assignment
	if len(s) != assignmentSize {
		return a, false
	}
	copy(a.TraceID[:], s[0:16])
	copy(a.SpanID[:], s[16:24])
	copy(a.Parent[:], s[24:32])
	return a, true
}

// EncodeOwner is four length-prefixed strings (api version, kind, name, UID). An empty owner is
// never stored: absence of a relation means "unknown", not "root".
func EncodeOwner(o model.Owner) string {
	b := make([]byte, 0, 4+len(o.APIVersion)+len(o.Kind)+len(o.Name)+len(o.UID)+4)
	for _, s := range [...]string{o.APIVersion, o.Kind, o.Name, o.UID} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return string(b)
}

// DecodeOwner reads a relation record; false for a malformed or empty owner.
func DecodeOwner(s string) (model.Owner, bool) {
	var parts [4]string
	for i := range parts {
		n, w := binary.Uvarint([]byte(s))
		if w <= 0 || uint64(len(s)-w) < n {
			return model.Owner{}, false
		}
		parts[i] = s[w : w+int(n)]
		s = s[w+int(n):]
	}
	if s != "" {
		return model.Owner{}, false
	}
	o := model.Owner{APIVersion: parts[0], Kind: parts[1], Name: parts[2], UID: parts[3]}
	return o, !o.IsZero()
}

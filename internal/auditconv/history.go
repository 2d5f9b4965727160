package auditconv

import (
	"strconv"
	"unsafe"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// historyLen is how many successful writes per object are kept for conflict links. A 409 is
// linked to the write that moved the resourceVersion the loser had read, which in practice is
// one of the last few writes: controllers retry conflicts within milliseconds.
const historyLen = 8

// write is a successful write of an object, kept so that a later 409 Conflict can link to it
// and a redelivered event be known by its auditID.
//
// Every cached object keeps up to historyLen of them, tombstones included, so they are kept
// compact: the apiserver's auditIDs are lower-case UUIDs (16 bytes as binary) and its
// resourceVersions decimal etcd revisions (a uint64), which saves three strings (their headers
// and their bytes, each a separate allocation) per write. A write whose values do not all have
// that canonical form keeps them as text in odd, and is compared as text: every comparison is
// exact, whatever the apiserver sends.
type write struct {
	id      [16]byte // the auditID as a UUID; unset when odd holds the write's text
	baseRV  uint64   // the resourceVersion the request was based on, as an rvCode
	newRV   uint64   // the resourceVersion in the response, when the body was audited, as an rvCode
	traceID pcommon.TraceID
	spanID  pcommon.SpanID
	odd     *oddWrite
}

// oddWrite holds a write's values as text when one of them has no compact form.
type oddWrite struct {
	auditID, baseRV, newRV string
}

// newWrite keeps a write: compact when its auditID is a canonical UUID and both its
// resourceVersions are empty or canonical decimals, as text otherwise.
func newWrite(auditID, baseRV, newRV string, traceID pcommon.TraceID, spanID pcommon.SpanID) write {
	w := write{traceID: traceID, spanID: spanID}
	id, ok1 := uuidCode(auditID)
	base, ok2 := rvCode(baseRV)
	next, ok3 := rvCode(newRV)
	if ok1 && ok2 && ok3 {
		w.id, w.baseRV, w.newRV = id, base, next
	} else {
		w.odd = &oddWrite{auditID: auditID, baseRV: baseRV, newRV: newRV}
	}
	return w
}

// textKey is a value to compare with a write's: the text, and its compact code when it has one.
// Two keys are equal exactly when their texts are: a canonical text has exactly one code, and a
// text without a code differs from every text with one.
type textKey[T comparable] struct {
	s    string
	code T
	ok   bool
}

func (k textKey[T]) equal(o textKey[T]) bool {
	if k.ok != o.ok {
		return false
	}
	if k.ok {
		return k.code == o.code
	}
	return k.s == o.s
}

func auditKey(s string) textKey[[16]byte] {
	c, ok := uuidCode(s)
	return textKey[[16]byte]{s: s, code: c, ok: ok}
}

func rvKey(s string) textKey[uint64] {
	c, ok := rvCode(s)
	return textKey[uint64]{s: s, code: c, ok: ok}
}

func (w *write) auditKey() textKey[[16]byte] {
	if w.odd != nil {
		return auditKey(w.odd.auditID)
	}
	return textKey[[16]byte]{code: w.id, ok: true}
}

func (w *write) baseKey() textKey[uint64] {
	if w.odd != nil {
		return rvKey(w.odd.baseRV)
	}
	return textKey[uint64]{code: w.baseRV, ok: true}
}

func (w *write) newKey() textKey[uint64] {
	if w.odd != nil {
		return rvKey(w.odd.newRV)
	}
	return textKey[uint64]{code: w.newRV, ok: true}
}

// auditIDString and newRVString give the write's values as the event had them.
func (w *write) auditIDString() string {
	if w.odd != nil {
		return w.odd.auditID
	}
	return formatUUID(w.id)
}

func (w *write) newRVString() string {
	if w.odd != nil {
		return w.odd.newRV
	}
	return rvString(w.newRV)
}

// newRVNumber is the response's resourceVersion as a number, when it is one (rvNumber).
func (w *write) newRVNumber() (uint64, bool) {
	if w.odd != nil {
		return rvNumber(w.odd.newRV)
	}
	return w.newRV - 1, w.newRV != 0
}

// Sizes in bytes, for the cache's byte bound: writeSize is one slot of an entry's history,
// oddWriteSize the text a write without a compact form keeps besides.
var (
	writeSize    = int64(unsafe.Sizeof(write{}))
	oddWriteSize = int64(unsafe.Sizeof(oddWrite{}))
)

// footprint is what the write keeps outside its slot.
func (w *write) footprint() int64 {
	if w.odd == nil {
		return 0
	}
	return oddWriteSize + int64(len(w.odd.auditID)+len(w.odd.baseRV)+len(w.odd.newRV))
}

// uuidCode parses a UUID in the canonical form the apiserver writes (8-4-4-4-12 lower-case
// hex digits); ok is false for any other text, upper-case hex included.
func uuidCode(s string) (id [16]byte, ok bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return id, false
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++
			continue
		}
		hi, ok1 := hexDigit(s[i])
		lo, ok2 := hexDigit(s[i+1])
		if !ok1 || !ok2 {
			return [16]byte{}, false
		}
		id[j] = hi<<4 | lo
		i += 2
		j++
	}
	return id, true
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// formatUUID writes id back in the form uuidCode parses.
func formatUUID(id [16]byte) string {
	const digits = "0123456789abcdef"
	var b [36]byte
	j := 0
	for i, c := range id {
		switch i {
		case 4, 6, 8, 10:
			b[j] = '-'
			j++
		}
		b[j], b[j+1] = digits[c>>4], digits[c&0xf]
		j += 2
	}
	return string(b[:])
}

// rvCode encodes a resourceVersion: 0 for none, n+1 for the decimal n written without sign or
// leading zeros ("0" included); ok is false for any other text and for the largest uint64,
// which would not fit.
func rvCode(s string) (uint64, bool) {
	if s == "" {
		return 0, true
	}
	if len(s) > 20 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (^uint64(0)-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	if n == ^uint64(0) {
		return 0, false
	}
	return n + 1, true
}

// rvString writes a code back as the text rvCode read.
func rvString(code uint64) string {
	if code == 0 {
		return ""
	}
	return strconv.FormatUint(code-1, 10)
}

// record appends a successful write to the entry's history.
func (e *cacheEntry) record(w write) {
	k := w.auditKey()
	for i := range e.history {
		if e.history[i].auditKey().equal(k) {
			return // redelivered
		}
	}
	if len(e.history) == historyLen {
		copy(e.history, e.history[1:])
		e.history = e.history[:historyLen-1]
	}
	e.history = append(e.history, w)
	e.charge()
	if e.c != nil {
		e.c.fit(e)
	}
}

// wrote reports whether the entry's history holds the write with this auditID: the event is a
// redelivery (a batch retried, or read from both the webhook and a log file). Callers hold the
// cache's lock.
func (e *cacheEntry) wrote(auditID string) bool {
	if !DedupAuditID(auditID) {
		return false // malformed: never taken for another request's redelivery
	}
	k := auditKey(auditID)
	for i := range e.history {
		if e.history[i].auditKey().equal(k) {
			return true
		}
	}
	return false
}

// conflictWinner finds the write that moved the object away from resourceVersion rv, which
// a request that failed with 409 Conflict had read. In order of confidence: a successful
// write based on the same rv (both read rv, it committed first); the write right after the
// one that produced rv; the earliest write with a larger rv. resourceVersions are opaque by
// contract, but every apiserver backed by etcd makes them increasing integers, and the last
// rule only applies where they are.
func (e *cacheEntry) conflictWinner(rv string) (write, bool) {
	k := rvKey(rv)
	for i := range e.history {
		if e.history[i].baseKey().equal(k) {
			return e.history[i], true
		}
	}
	for i := range e.history {
		if e.history[i].newKey().equal(k) && i+1 < len(e.history) {
			return e.history[i+1], true
		}
	}
	if n, ok := rvNumber(rv); ok {
		for i := range e.history {
			if m, ok := e.history[i].newRVNumber(); ok && m > n {
				return e.history[i], true
			}
		}
	}
	return write{}, false
}

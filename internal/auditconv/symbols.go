package auditconv

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/kubetrail/kubetrail/internal/auditconv/internal/jsonscan"
)

// symbolTable turns recurring short byte strings into strings without allocating each time:
// every audit event names its verb, stage, level, user, groups, user agent, resource and
// namespace, and carries the authorizer's decision and reason (`RBAC: allowed by
// ClusterRoleBinding "…" of ClusterRole "…" to ServiceAccount "…"`, 100 to 200 bytes): a
// cluster has few of each. It is a fixed table, one string per slot, the last one stored
// winning a slot: bounded whatever the input (symbolSlots strings of at most
// maxSymbolBytes), lock-free, and a value that does not recur only costs what it always did,
// plus the slot's pointer.
type symbolTable struct {
	seed  maphash.Seed
	slots [symbolSlots]atomic.Pointer[string]
}

const (
	symbolSlots    = 4096
	maxSymbolBytes = 256
)

var symbols = &symbolTable{seed: maphash.MakeSeed()}

// of returns b as a string, the table's when it holds one equal to b.
func (t *symbolTable) of(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > maxSymbolBytes {
		return string(b)
	}
	slot := &t.slots[maphash.Bytes(t.seed, b)&(symbolSlots-1)]
	if p := slot.Load(); p != nil && *p == string(b) {
		return *p
	}
	s := string(b)
	slot.Store(&s)
	return s
}

// ofQuoted is of for the bytes between a JSON string's quotes (plain as jsonscan.ScanString says):
// unquoted on the stack, so that a value the table holds costs no allocation even with escapes.
func (t *symbolTable) ofQuoted(inner []byte, plain bool) string {
	if plain {
		return t.of(inner)
	}
	var buf [maxSymbolBytes]byte
	return t.of(jsonscan.AppendUnquoted(buf[:0], inner))
}

package auditconv

import (
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// plainWrite and plainHistory are the history as text, the way it was kept before writes were
// compact: the oracle the compact history must agree with.
type plainWrite struct{ auditID, baseRV, newRV string }

type plainHistory []plainWrite

func (h *plainHistory) record(w plainWrite) {
	for _, x := range *h {
		if x.auditID == w.auditID {
			return
		}
	}
	if len(*h) == historyLen {
		*h = (*h)[1:]
	}
	*h = append(*h, w)
}

func (h plainHistory) wrote(id string) bool {
	if !DedupAuditID(id) {
		return false
	}
	for _, x := range h {
		if x.auditID == id {
			return true
		}
	}
	return false
}

func (h plainHistory) conflictWinner(rv string) (plainWrite, bool) {
	for _, w := range h {
		if w.baseRV == rv {
			return w, true
		}
	}
	for i, w := range h {
		if w.newRV == rv && i+1 < len(h) {
			return h[i+1], true
		}
	}
	if n, ok := rvNumber(rv); ok {
		for _, w := range h {
			if m, ok := rvNumber(w.newRV); ok && m > n {
				return w, true
			}
		}
	}
	return plainWrite{}, false
}

// baseRVString is for tests: the write's base resourceVersion as the event had it.
func (w *write) baseRVString() string {
	if w.odd != nil {
		return w.odd.baseRV
	}
	return rvString(w.baseRV)
}

const testUUID = "4f0c5a54-3b0e-4c1e-9a57-0d3c11e2f7a9"

// checkHistory records the same writes in a compact history and in the oracle, then asks both
// every question the converter asks, with every value as the question.
func checkHistory(t *testing.T, writes []plainWrite, questions []string) {
	t.Helper()
	e := &cacheEntry{}
	var plain plainHistory
	for i, p := range writes {
		w := newWrite(p.auditID, p.baseRV, p.newRV, pcommon.TraceID{byte(i + 1)}, pcommon.SpanID{byte(i + 1)})
		if got := (plainWrite{w.auditIDString(), w.baseRVString(), w.newRVString()}); got != p {
			t.Fatalf("write %q kept as %q", p, got)
		}
		if w.odd == nil && w.footprint() != 0 {
			t.Fatalf("compact write %q charged %d bytes outside its slot", p, w.footprint())
		}
		e.record(w)
		plain.record(p)
	}
	if len(e.history) != len(plain) {
		t.Fatalf("history holds %d writes, the oracle %d", len(e.history), len(plain))
	}
	for i := range plain {
		w := &e.history[i]
		if got := (plainWrite{w.auditIDString(), w.baseRVString(), w.newRVString()}); got != plain[i] {
			t.Fatalf("history[%d] = %q, the oracle has %q", i, got, plain[i])
		}
	}
	for _, q := range questions {
		if got, want := e.wrote(q), plain.wrote(q); got != want {
			t.Errorf("wrote(%q) = %v, the oracle says %v", q, got, want)
		}
		w, ok := e.conflictWinner(q)
		p, pok := plain.conflictWinner(q)
		if ok != pok {
			t.Errorf("conflictWinner(%q) found %v, the oracle %v", q, ok, pok)
			continue
		}
		if ok && (plainWrite{w.auditIDString(), w.baseRVString(), w.newRVString()}) != p {
			t.Errorf("conflictWinner(%q) = %q, the oracle %q", q, w.auditIDString(), p.auditID)
		}
	}
}

func TestHistoryCompact(t *testing.T) {
	if writeSize > 64 {
		t.Errorf("a history slot takes %d bytes; it was laid out in 64", writeSize)
	}
	for s, want := range map[string]bool{
		testUUID:                               true,
		strings.ToUpper(testUUID):              false,
		testUUID[:35]:                          false,
		testUUID + "0":                         false,
		strings.Replace(testUUID, "-", "0", 1): false,
		strings.Replace(testUUID, "4", "g", 1): false,
		"":                                     false,
	} {
		id, ok := uuidCode(s)
		if ok != want {
			t.Errorf("uuidCode(%q) ok = %v, want %v", s, ok, want)
		}
		if ok && formatUUID(id) != s {
			t.Errorf("uuidCode(%q) formats back as %q", s, formatUUID(id))
		}
	}
	maxRV := strconv.FormatUint(^uint64(0), 10)
	for s, want := range map[string]bool{
		"": true, "0": true, "1": true, "123456789": true, "18446744073709551614": true,
		maxRV: false, "18446744073709551616": false, "00": false, "007": false, "+1": false,
		"-1": false, "1a": false, " 1": false, "123456789012345678901": false,
	} {
		c, ok := rvCode(s)
		if ok != want {
			t.Errorf("rvCode(%q) ok = %v, want %v", s, ok, want)
		}
		if ok && rvString(c) != s {
			t.Errorf("rvCode(%q) formats back as %q", s, rvString(c))
		}
	}

	// An apiserver's writes: compact, and each conflict finds its winner.
	var writes []plainWrite
	var questions []string
	for i := range 10 {
		id := testUUID[:30] + strconv.Itoa(100000+i)
		writes = append(writes, plainWrite{id, strconv.Itoa(100 + i), strconv.Itoa(101 + i)})
		questions = append(questions, id, strconv.Itoa(100+i), strconv.Itoa(101+i))
	}
	questions = append(questions, "", "0", "99", "1000", "0101", "x")
	checkHistory(t, writes, questions)

	// Values that keep their text: each compared as text, next to compact ones.
	odd := []plainWrite{
		{strings.ToUpper(testUUID), "5", "6"},
		{testUUID, "05", "6"},
		{"", "7", "8"},
		{"", "8", "9"},
		{strings.Repeat("a", MaxAuditIDBytes), "9", maxRV},
		{testUUID[:35] + "b", "opaque", ""},
		{testUUID, "6", "7"},
	}
	checkHistory(t, odd, []string{testUUID, strings.ToUpper(testUUID), "", "5", "05", "6", "7", "8", maxRV, "opaque", "4"})
	if e := (&cacheEntry{history: []write{newWrite("id", "1", "2", pcommon.TraceID{}, pcommon.SpanID{})}}); e.history[0].footprint() != oddWriteSize+4 {
		t.Errorf("an odd write is charged %d bytes, want %d", e.history[0].footprint(), oddWriteSize+4)
	}
}

// FuzzHistory: whatever text the auditIDs and resourceVersions hold, the compact history
// answers exactly as the history of strings did.
func FuzzHistory(f *testing.F) {
	f.Add(testUUID, "10", "11", "")
	f.Add(strings.ToUpper(testUUID), "010", "18446744073709551615", "0")
	f.Add(testUUID[:35]+"g", "", "18446744073709551614", "abc")
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		values := []string{a, b, c, d, "", testUUID, strings.ToUpper(a), "0" + b, c + "0"}
		var writes []plainWrite
		for i := range values {
			writes = append(writes, plainWrite{values[i], values[(i+1)%len(values)], values[(i+2)%len(values)]})
			writes = append(writes, plainWrite{values[(i+3)%len(values)], values[i], values[(i+4)%len(values)]})
		}
		checkHistory(t, writes, values)
	})
}

package main

// The report: one run's figures, and how bench-audit and bench-kafka print them.

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// result is one run: what was sent, what the collector answered and spent, what arrived.
type result struct {
	label, workload, capture string
	passes                   int
	events, bytes, batches   int64
	status                   map[string]int64
	sendTime                 time.Duration // first request to last answer
	drainTime                time.Duration // first request to last span at the sink
	cpu                      float64       // collector CPU seconds, first request to last span
	peakRSS                  int64         // KiB
	allocBytes               float64       // -1 when the collector does not expose it
	auditExpected            int64         // traced events of the batches answered 200
	auditArrived             int64         // of those, the ones whose span arrived
	auditRefusedArrived      int64         // spans of refused batches that arrived anyway (see sink.account)
	auditUnexpected          int64         // audit spans of no posted event
	objectsEmitted           float64       // -1 when the collector does not expose it
	objectsArrived           int64
	otherArrived             int64
	duplicates               int64
	objectDuplicates         int64 // of duplicates, object spans: emitted again, so counted twice in objectsEmitted
	exports                  int64 // export requests the sink received
	wireBytes, rawBytes      int64 // their messages' bytes on the wire and decompressed

	report     string       // -report
	foreign    bool         // -foreign: the spans are another tracer's, none expected by ID
	extraProcs int          // processes of -extra-pids and -extra-pids-file
	extraCPU   float64      // their CPU seconds, summed, over the same interval as cpu (from a wait's end for the file's)
	lag        lagSummary   // of the audit spans of batches answered 200 that arrived
	answer     lagSummary   // of the same spans: their request's answer read minus its write's start
	catchUp    *catchUpTime // with -pause-file
}

// catchUpTime is when the drain after a pause began and how it went.
type catchUpTime struct {
	paused     time.Duration // first request to the pause's end (the processing tier's start)
	firstAudit time.Duration // the pause's end to the first audit span (zero: none arrived)
	lastAudit  time.Duration // the pause's end to the last audit span
	drained    time.Duration // the pause's end to the last span of any kind
}

// rate is the audit spans per second over the time from the first to the last audit arrival.
func (c *catchUpTime) rate(arrived int64) float64 {
	d := c.lastAudit - c.firstAudit
	if d <= 0 || arrived < 2 {
		return 0
	}
	return float64(arrived) / d.Seconds()
}

// lagSummary is the nearest-rank percentiles of a set of lags.
type lagSummary struct {
	n             int
	p50, p99, max time.Duration
}

// summarize sorts lags in place and returns their p50, p99 and maximum.
func summarize(lags []time.Duration) lagSummary {
	slices.Sort(lags)
	s := lagSummary{n: len(lags), p50: percentile(lags, 50), p99: percentile(lags, 99)}
	if len(lags) > 0 {
		s.max = lags[len(lags)-1]
	}
	return s
}

// percentile is the nearest-rank p-th percentile (0 < p <= 100) of sorted: the smallest value
// that at least p % of the values do not exceed. Zero for no values.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	// p*n first: that product is exact, so p99.9 of 1,000 values is rank 999 (p/100*n rounds up to 1,000).
	rank := int(math.Ceil(p * float64(len(sorted)) / 100))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func (r *result) statusText() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.status)) {
		parts = append(parts, fmt.Sprintf("%s:%d", k, r.status[k]))
	}
	return strings.Join(parts, " ")
}

func (r *result) refusedArrivedText() string {
	if r.auditRefusedArrived == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d spans of refused batches arrived)", r.auditRefusedArrived)
}

func (r *result) lost() (audit int64, objects string) {
	audit = r.auditExpected - r.auditArrived + r.auditUnexpected
	objects = "n/a"
	if r.objectsEmitted >= 0 {
		// An object span emitted again with its IDs (its window's assignment evicted and written
		// again) is two emissions and one distinct arrival: its second copy is not a loss.
		objects = strconv.FormatInt(int64(r.objectsEmitted)-r.objectsArrived-r.objectDuplicates, 10)
	}
	return audit, objects
}

func (r *result) print(w io.Writer) {
	perEvent := r.cpu / float64(r.events) * 1e6
	fmt.Fprintf(w, "benchaudit %s, %s: %d passes of %s, %d events in %d requests (%.1f MiB), answers %s\n",
		r.label, r.workload, r.passes, r.capture, r.events, r.batches, float64(r.bytes)/(1<<20), r.statusText())
	fmt.Fprintf(w, "  sent in %s (%.0f events/s), drained in %s\n", r.sendTime.Round(time.Millisecond),
		float64(r.events)/r.sendTime.Seconds(), r.drainTime.Round(time.Millisecond))
	fmt.Fprintf(w, "  collector CPU %.2f s = %.1f µs per posted event, peak RSS %d MiB", r.cpu, perEvent, r.peakRSS/1024)
	if r.allocBytes >= 0 {
		fmt.Fprintf(w, ", %.0f bytes allocated per event", r.allocBytes/float64(r.events))
	}
	fmt.Fprintln(w)
	lostAudit, lostObjects := r.lost()
	emitted := "n/a"
	if r.objectsEmitted >= 0 {
		emitted = strconv.FormatInt(int64(r.objectsEmitted), 10)
	}
	if r.foreign {
		fmt.Fprintf(w, "  spans arrived %d (%.2f per posted event), none expected by ID; duplicate copies %d\n",
			r.otherArrived, float64(r.otherArrived)/float64(r.events), r.duplicates)
	} else {
		fmt.Fprintf(w, "  audit spans expected %d, arrived %d, lost %d; object spans emitted %s, arrived %d, lost %s; other %d; duplicate copies %d\n",
			r.auditExpected, r.auditArrived, lostAudit, emitted, r.objectsArrived, lostObjects, r.otherArrived, r.duplicates)
	}
	if spans := r.auditArrived + r.objectsArrived + r.otherArrived + r.duplicates; r.exports > 0 && spans > 0 {
		fmt.Fprintf(w, "  export: %d requests, %.1f spans each, %.0f bytes per span on the wire, %.0f decompressed (%.2f×)\n",
			r.exports, float64(spans)/float64(r.exports), float64(r.wireBytes)/float64(spans), float64(r.rawBytes)/float64(spans),
			float64(r.rawBytes)/float64(r.wireBytes))
	}
	if r.auditRefusedArrived > 0 || r.auditUnexpected > 0 {
		fmt.Fprintf(w, "  also arrived: %d audit spans of refused batches (held by k8s_object_link, kept), %d of no posted event (counted as lost)\n",
			r.auditRefusedArrived, r.auditUnexpected)
	}
	if r.report != "tiers" {
		return
	}
	if r.extraProcs > 0 {
		fmt.Fprintf(w, "  other processes' CPU (%d) %.2f s = %.1f µs per posted event\n", r.extraProcs, r.extraCPU, r.extraCPU/float64(r.events)*1e6)
	}
	round := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	fmt.Fprintf(w, "  lag (first arrival at the sink - start of the request's write) of %d audit spans: p50 %s, p99 %s, max %s; the answer's share (answer read - start of the write): p50 %s, p99 %s, max %s\n",
		r.lag.n, round(r.lag.p50), round(r.lag.p99), round(r.lag.max), round(r.answer.p50), round(r.answer.p99), round(r.answer.max))
	if c := r.catchUp; c != nil {
		fmt.Fprintf(w, "  catch-up: the pause ended %s after the first request; from then, first audit span after %s, last after %s, drained after %s: %.0f audit spans/s\n",
			c.paused.Round(time.Millisecond), c.firstAudit.Round(time.Millisecond), c.lastAudit.Round(time.Millisecond),
			c.drained.Round(time.Millisecond), c.rate(r.auditArrived))
	}
}

// tsv is the row bench-audit.sh (or, -report tiers, bench-kafka.sh) turns into its table; the
// columns are its header's.
func (r *result) tsv() string {
	if r.report == "tiers" {
		return r.tiersTSV()
	}
	alloc := "n/a"
	if r.allocBytes >= 0 {
		alloc = fmt.Sprintf("%.0f", r.allocBytes/float64(r.events))
	}
	emitted := "n/a"
	if r.objectsEmitted >= 0 {
		emitted = strconv.FormatInt(int64(r.objectsEmitted), 10)
	}
	lostAudit, lostObjects := r.lost()
	auditCol := fmt.Sprintf("%d / %d / %d", r.auditExpected, r.auditArrived, lostAudit)
	objectCol := fmt.Sprintf("%s / %d / %s", emitted, r.objectsArrived, lostObjects)
	if r.foreign {
		// Its spans are of no kubetrail type: all of them in the audit column, nothing expected.
		auditCol, objectCol = fmt.Sprintf("n/a / %d spans / n/a", r.otherArrived), "n/a"
	}
	return strings.Join([]string{
		r.label, r.workload, strconv.Itoa(r.passes), strconv.FormatInt(r.events, 10),
		fmt.Sprintf("%.1f", float64(r.bytes)/(1<<20)),
		fmt.Sprintf("%.1f", r.cpu/float64(r.events)*1e6),
		fmt.Sprintf("%.0f", float64(r.events)/r.sendTime.Seconds()),
		fmt.Sprintf("%.1f", r.drainTime.Seconds()),
		alloc,
		strconv.FormatInt(r.peakRSS/1024, 10),
		auditCol, objectCol,
		strconv.FormatInt(r.duplicates, 10),
		r.statusText() + r.refusedArrivedText(),
	}, "\t")
}

// tiersTSV is bench-kafka.sh's row: label, workload, events posted, events/s, the -pid's CPU µs
// and bytes allocated per posted event and peak RSS (MiB), the other processes' CPU µs per posted
// event, lag p50, p99 and max and the answer's p99 (ms), audit spans expected / arrived / lost,
// duplicate copies, HTTP answers, and after a pause the time from its end to drained (s) and the
// catch-up rate (audit spans/s); "-" where there is none.
func (r *result) tiersTSV() string {
	alloc, extra, drained, rate := "n/a", "-", "-", "-"
	if r.allocBytes >= 0 {
		alloc = fmt.Sprintf("%.0f", r.allocBytes/float64(r.events))
	}
	if r.extraProcs > 0 {
		extra = fmt.Sprintf("%.1f", r.extraCPU/float64(r.events)*1e6)
	}
	if c := r.catchUp; c != nil {
		drained = fmt.Sprintf("%.1f", c.drained.Seconds())
		rate = fmt.Sprintf("%.0f", c.rate(r.auditArrived))
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }
	lostAudit, _ := r.lost()
	return strings.Join([]string{
		r.label, r.workload, strconv.FormatInt(r.events, 10),
		fmt.Sprintf("%.0f", float64(r.events)/r.sendTime.Seconds()),
		fmt.Sprintf("%.1f", r.cpu/float64(r.events)*1e6), alloc, strconv.FormatInt(r.peakRSS/1024, 10),
		extra, ms(r.lag.p50), ms(r.lag.p99), ms(r.lag.max), ms(r.answer.p99),
		fmt.Sprintf("%d / %d / %d", r.auditExpected, r.auditArrived, lostAudit),
		strconv.FormatInt(r.duplicates, 10),
		r.statusText() + r.refusedArrivedText(),
		drained, rate,
	}, "\t")
}

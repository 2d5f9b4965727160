package main

// What arrived: the counting OTLP gRPC backend the collector exports to.

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"

	"github.com/kubetrail/kubetrail/internal/model"
)

// sink is the counting OTLP gRPC backend: distinct span IDs by span type, duplicates, when each
// audit span first arrived, and the collectors' CPU time when the latest spans arrived.
type sink struct {
	ptraceotlp.UnimplementedGRPCServer
	srv *grpc.Server

	mu     sync.Mutex
	seen   map[pcommon.SpanID]struct{}
	audit  map[pcommon.SpanID]time.Time // the audit spans among them, and their first arrival
	counts snapshot
	pid    int
	clkTck float64
	extra  []extraProc
}

// extraProc is a process of -extra-pids: its CPU seconds when it was first read and last read.
type extraProc struct {
	pid         int
	first, last float64
}

type snapshot struct {
	audit, object, other, duplicates int64
	objectDuplicates                 int64 // of duplicates: an object span emitted again with its IDs
	requests, wireBytes, rawBytes    int64 // export requests, their messages' bytes as sent and decompressed
	last                             time.Time
	firstAudit, lastAudit            time.Time
	cpu                              float64
	extraProcs                       int
	extraCPU                         float64 // the extra processes' CPU seconds since they were first read
}

func startSink(cfg config) (*sink, error) {
	lis, err := net.Listen("tcp", cfg.sink)
	if err != nil {
		return nil, fmt.Errorf("sink: %w", err)
	}
	s := &sink{seen: map[pcommon.SpanID]struct{}{}, audit: map[pcommon.SpanID]time.Time{}}
	s.srv = grpc.NewServer(grpc.MaxRecvMsgSize(64<<20), grpc.StatsHandler(wireCounter{s}))
	ptraceotlp.RegisterGRPCServer(s.srv, s)
	go func() { _ = s.srv.Serve(lis) }()
	return s, nil
}

func (s *sink) stop() { s.srv.Stop() }

func (s *sink) watch(pid int, clkTck float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pid, s.clkTck = pid, clkTck
}

// watchExtra adds the processes not watched yet, their CPU counted from now on.
func (s *sink) watchExtra(pids []int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pid := range pids {
		if slices.ContainsFunc(s.extra, func(p extraProc) bool { return p.pid == pid }) {
			continue
		}
		cpu, err := cpuSeconds(pid, s.clkTck)
		if err != nil {
			return err
		}
		s.extra = append(s.extra, extraProc{pid: pid, first: cpu, last: cpu})
	}
	s.counts.extraProcs = len(s.extra)
	s.counts.extraCPU = s.extraCPULocked()
	return nil
}

// watchExtraFile watches the processes listed in path (nothing for no path).
func (s *sink) watchExtraFile(path string) error {
	if path == "" {
		return nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("-extra-pids-file: %w", err)
	}
	pids, err := parsePIDs(string(raw))
	if err == nil {
		err = s.watchExtra(pids)
	}
	if err != nil {
		return fmt.Errorf("-extra-pids-file %s: %w", path, err)
	}
	return nil
}

// readExtra reads the extra processes' CPU now and returns it, summed, since their first reading.
func (s *sink) readExtra() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readExtraLocked()
	return s.extraCPULocked()
}

// readExtraLocked updates each extra process's last reading; one that has exited keeps its last.
func (s *sink) readExtraLocked() {
	for i := range s.extra {
		if cpu, err := cpuSeconds(s.extra[i].pid, s.clkTck); err == nil {
			s.extra[i].last = cpu
		}
	}
}

func (s *sink) extraCPULocked() float64 {
	var sum float64
	for _, p := range s.extra {
		sum += p.last - p.first
	}
	return sum
}

func (s *sink) snapshot() snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts
}

// accounting compares the audit spans that arrived with those posted.
type accounting struct {
	missing int64 // posted in a batch answered 200, not arrived: lost
	refused int64 // posted in a refused batch, arrived anyway: k8s_object_link keeps the spans it
	// holds for owner_wait whatever the next consumer answers (the apiserver's retry of the batch
	// then finds them marked), so a 503 does not take back every span of its batch
	unexpected int64 // arrived, never posted
	// lags of the spans of accepted batches that arrived: first arrival minus the request's
	// start, and the answer's share of it (answer read minus the request's start), unsorted
	lags, answers []time.Duration
}

func (s *sink) account(posted map[pcommon.SpanID]postedSpan) accounting {
	s.mu.Lock()
	defer s.mu.Unlock()
	var a accounting
	for id, p := range posted {
		at, arrived := s.audit[id]
		switch {
		case p.accepted && !arrived:
			a.missing++
		case p.accepted:
			a.lags = append(a.lags, at.Sub(p.sent))
			a.answers = append(a.answers, p.answered.Sub(p.sent))
		case arrived:
			a.refused++
		}
	}
	for id := range s.audit {
		if _, ok := posted[id]; !ok {
			a.unexpected++
		}
	}
	return a
}

// writeSpans writes, for each audit span of a batch answered 200 in the order sent, the Unix
// nanoseconds its request started to be written, its answer was read and it first arrived (0:
// never), tab-separated: where a lag came from, the edge's answer or what followed it.
func (s *sink) writeSpans(w io.Writer, posted map[pcommon.SpanID]postedSpan) error {
	type row struct{ sent, answered, arrived int64 }
	s.mu.Lock()
	rows := make([]row, 0, len(posted))
	for id, p := range posted {
		if !p.accepted {
			continue
		}
		r := row{sent: p.sent.UnixNano(), answered: p.answered.UnixNano()}
		if at, ok := s.audit[id]; ok {
			r.arrived = at.UnixNano()
		}
		rows = append(rows, r)
	}
	s.mu.Unlock()
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(a.sent, b.sent) })
	for _, r := range rows {
		if _, err := fmt.Fprintf(w, "%d\t%d\t%d\n", r.sent, r.answered, r.arrived); err != nil {
			return err
		}
	}
	return nil
}

// wireCounter counts what each export request's message took on the wire (compressed, as the
// exporter's compression left it, with gRPC's 5-byte frame) and decompressed.
type wireCounter struct{ s *sink }

func (wireCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (wireCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (wireCounter) HandleConn(context.Context, stats.ConnStats)                       {}

func (w wireCounter) HandleRPC(_ context.Context, st stats.RPCStats) {
	if p, ok := st.(*stats.InPayload); ok {
		w.s.mu.Lock()
		w.s.counts.requests++
		w.s.counts.wireBytes += int64(p.WireLength)
		w.s.counts.rawBytes += int64(p.Length)
		w.s.mu.Unlock()
	}
}

func (s *sink) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	rss := req.Traces().ResourceSpans()
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	audit := false
	for i := range rss.Len() {
		sss := rss.At(i).ScopeSpans()
		for j := range sss.Len() {
			spans := sss.At(j).Spans()
			for k := range spans.Len() {
				sp := spans.At(k)
				typ, _ := sp.Attributes().Get(model.AttrSpanType)
				if _, dup := s.seen[sp.SpanID()]; dup {
					s.counts.duplicates++
					if typ.Str() == model.SpanTypeObject {
						s.counts.objectDuplicates++
					}
					continue
				}
				s.seen[sp.SpanID()] = struct{}{}
				switch typ.Str() {
				case model.SpanTypeAudit:
					s.counts.audit++
					s.audit[sp.SpanID()] = now
					audit = true
				case model.SpanTypeObject:
					s.counts.object++
				default:
					s.counts.other++
				}
			}
		}
	}
	s.counts.last = now
	if audit {
		if s.counts.firstAudit.IsZero() {
			s.counts.firstAudit = now
		}
		s.counts.lastAudit = now
	}
	if s.pid > 0 {
		if cpu, err := cpuSeconds(s.pid, s.clkTck); err == nil {
			s.counts.cpu = cpu
		}
	}
	if len(s.extra) > 0 {
		s.readExtraLocked()
		s.counts.extraCPU = s.extraCPULocked()
	}
	return ptraceotlp.NewExportResponse(), nil
}

package main

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip"
)

// The sink reads each compression the bench scripts may configure, and counts every request's
// bytes as sent and decompressed.
func TestSinkReadsEveryCompressionAndCountsItsBytes(t *testing.T) {
	for _, enc := range []string{"", "gzip", "zstd", "snappy"} {
		t.Run(enc, func(t *testing.T) {
			addr := freeAddr(t)
			s, err := startSink(config{sink: addr})
			if err != nil {
				t.Fatal(err)
			}
			defer s.stop()
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			td := ptrace.NewTraces()
			spans := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans()
			for i := range 50 {
				sp := spans.AppendEmpty()
				sp.SetSpanID([8]byte{byte(i + 1)})
				sp.SetName("update " + strings.Repeat("deployments ", 20))
			}
			req := ptraceotlp.NewExportRequestFromTraces(td)
			raw, err := req.MarshalProto()
			if err != nil {
				t.Fatal(err)
			}
			var opts []grpc.CallOption
			if enc != "" {
				opts = append(opts, grpc.UseCompressor(enc))
			}
			for range 2 {
				if _, err := ptraceotlp.NewGRPCClient(conn).Export(context.Background(), req, opts...); err != nil {
					t.Fatalf("export with %q: %v", enc, err)
				}
			}
			c := s.snapshot()
			if c.requests != 2 || c.rawBytes != 2*int64(len(raw)) || c.other != 50 || c.duplicates != 50 {
				t.Fatalf("requests %d, decompressed %d bytes (want 2, %d), spans %d and %d copies (want 50, 50)", c.requests, c.rawBytes, 2*len(raw), c.other, c.duplicates)
			}
			if compressed := c.wireBytes < c.rawBytes/2; compressed != (enc != "") {
				t.Fatalf("%q: %d bytes on the wire for %d decompressed", enc, c.wireBytes, c.rawBytes)
			}
		})
	}
}

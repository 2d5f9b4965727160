package goldentest

import (
	"os"
	"path/filepath"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestUpdateWritesAReadableFileAndReadsItBack(t *testing.T) {
	got := ptrace.NewTraces()
	got.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty().SetName("Deployment default/demo")
	path := filepath.Join(t.TempDir(), "golden.yaml")

	*update = true
	defer func() { *update = false }()
	want := Traces(t, path, got)
	if want.SpanCount() != 1 || want.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).Name() != "Deployment default/demo" {
		t.Fatal("the written file must read back as the traces written")
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("golden file mode %v, %v", st.Mode().Perm(), err)
	}

	*update = false
	if again := Traces(t, path, ptrace.NewTraces()); again.SpanCount() != 1 {
		t.Fatal("without -update the file must be read, not overwritten")
	}
}

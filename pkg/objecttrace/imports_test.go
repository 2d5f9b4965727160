package objecttrace

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The package is imported by controllers: its dependencies must stay the OTel API and
// apimachinery (and internal/objid). A collector module or client-go would force their versions
// on every controller that imports it.
func TestImportsNoCollectorModuleNorClientGo(t *testing.T) {
	// The go command that runs this test (go test sets $GOROOT for it), else the one on PATH.
	goTool := "go"
	if root := os.Getenv("GOROOT"); root != "" {
		goTool = filepath.Join(root, "bin", "go")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %d packages: %v", len(deps), deps)
	}
	for _, dep := range deps {
		forbidden := strings.HasPrefix(dep, "go.opentelemetry.io/collector") ||
			strings.HasPrefix(dep, "k8s.io/client-go") ||
			strings.HasPrefix(dep, "go.opentelemetry.io/otel/sdk") ||
			(strings.HasPrefix(dep, "github.com/kubetrail/kubetrail/") &&
				dep != "github.com/kubetrail/kubetrail/internal/objid" &&
				dep != "github.com/kubetrail/kubetrail/pkg/objecttrace")
		if forbidden {
			t.Errorf("pkg/objecttrace depends on %s", dep)
		}
	}
}

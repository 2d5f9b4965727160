package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/pflag"
)

// The build's version, commit and date, set by the linker: the Makefile and
// testbed/hack/release.sh build with
//
//	-ldflags "-X main.version=0.1.0 -X main.commit=<full SHA> -X main.date=<commit time, RFC 3339 UTC>"
//
// where the version is builder-config.yaml's dist.version, the one version of the collector, the
// CLI, the image and the chart (docs/releasing.md). A plain `go build` or `go install` leaves them
// empty, and buildVersion reads what the Go toolchain recorded in the binary instead.
var (
	version string
	commit  string
	date    string
)

// versionInfo is what `kubetrail version` prints; its JSON is `-o json`'s.
type versionInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	// TreeState is "dirty" when the Go toolchain recorded uncommitted changes in the tree the
	// binary was built from, "clean" when it recorded none, empty when it recorded nothing.
	TreeState string `json:"treeState,omitempty"`
	BuildDate string `json:"buildDate"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// buildVersion is this binary's versionInfo.
func buildVersion() versionInfo {
	return readVersion(version, commit, date, debug.ReadBuildInfo)
}

// readVersion fills what the linker did not set (v, c, d empty) from the build information the
// Go toolchain records: the main module's version (a tag, or a pseudo-version of the commit, when
// built with `go install MODULE@VERSION` or from a repository), vcs.revision and vcs.time.
func readVersion(v, c, d string, read func() (*debug.BuildInfo, bool)) versionInfo {
	info := versionInfo{Version: v, Commit: c, BuildDate: d, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := read(); ok && bi != nil {
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = strings.TrimPrefix(bi.Main.Version, "v")
		}
		var revision, vcsTime, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.time":
				vcsTime = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if info.Commit == "" {
			info.Commit = revision
		}
		if info.BuildDate == "" {
			info.BuildDate = vcsTime
		}
		// The recorded tree state is of the recorded revision: it says nothing of an injected one.
		if revision != "" && revision == info.Commit {
			switch modified {
			case "true":
				info.TreeState = "dirty"
			case "false":
				info.TreeState = "clean"
			}
		}
	}
	for _, f := range []*string{&info.Version, &info.Commit, &info.BuildDate} {
		if *f == "" {
			*f = "unknown"
		}
	}
	return info
}

// text is the version as `kubetrail version` and `kubetrail --version` print it.
func (v versionInfo) text(prog string) string {
	c := v.Commit
	if v.TreeState == "dirty" {
		c += " (dirty tree)"
	}
	return fmt.Sprintf("%s version %s\ncommit: %s\nbuilt: %s\ngo: %s %s\n", prog, v.Version, c, v.BuildDate, v.GoVersion, v.Platform)
}

// runVersion is `kubetrail version`; prog is the program as typed, cmd the command.
func runVersion(prog, cmd string, args []string, stdout io.Writer) error {
	output := "text"
	c := newCommand(cmd, "Print the version of this command: the release, the commit, the build date and the Go version.",
		`The release is the version of the collector (otelcol-kubetrail --version), the image and the Helm chart
of the same release (docs/releasing.md).`,
		fmt.Sprintf("  # The version, as JSON\n  %s -o json\n", cmd), "[options]")
	c.group("Output", func(fs *pflag.FlagSet) {
		fs.StringVarP(&output, "output", "o", output, "text or json.")
	})
	pos, err := c.parse(args, stdout)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("%s takes no arguments (got %s)", cmd, strings.Join(pos, " "))
	}
	v := buildVersion()
	switch output {
	case "text":
		_, err = io.WriteString(stdout, v.text(prog))
	case "json":
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(v)
	default:
		return usagef("--output %q: want text or json", output)
	}
	return err
}

// Command release writes the parts of a kubetrail release that need more than a shell:
// reproducible .tar.gz archives, the krew plugin manifest over the CLI archives, and an SPDX 2.3
// SBOM of the built binaries read from their Go build information (what `go version -m` prints).
// testbed/hack/release.sh (`make release`, docs/releasing.md) calls it:
//
//	release archive -out kubectl-trail_v0.1.0_linux_amd64.tar.gz -mtime 1764000000 bin/kubectl-trail LICENSE
//	release krew -version 0.1.0 -url https://…/v0.1.0 -out trail.yaml kubectl-trail_v0.1.0_*.tar.gz
//	release sbom -version 0.1.0 -commit SHA -created 2026-…Z -namespace URI -out sbom.spdx.json BINARY…
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("want a subcommand: archive, krew or sbom")
	}
	fs := flag.NewFlagSet("release "+args[0], flag.ContinueOnError)
	out := fs.String("out", "", "the file to write (required)")
	switch args[0] {
	case "archive":
		mtime := fs.Int64("mtime", 0, "every entry's time, Unix seconds (the commit's)")
		if err := parse(fs, args[1:], out, 1); err != nil {
			return err
		}
		if err := writeArchive(*out, time.Unix(*mtime, 0).UTC(), fs.Args()); err != nil {
			return err
		}
	case "krew":
		version := fs.String("version", "", "the release version, without v (required)")
		url := fs.String("url", "", "where the release's files are downloaded from (required)")
		if err := parse(fs, args[1:], out, 1); err != nil {
			return err
		}
		if *version == "" || *url == "" {
			return fmt.Errorf("krew: -version and -url are required")
		}
		m, err := krewManifest(*version, *url, fs.Args())
		if err != nil {
			return err
		}
		if err := writeYAML(*out, m); err != nil {
			return err
		}
	case "sbom":
		var o sbomOptions
		fs.StringVar(&o.version, "version", "", "the release version (required)")
		fs.StringVar(&o.commit, "commit", "", "the commit the release is built from")
		created := fs.String("created", "", "the document's creation time, RFC 3339 (the commit's)")
		fs.StringVar(&o.namespace, "namespace", "", "the SPDX document namespace, a URI unique to this release (required)")
		if err := parse(fs, args[1:], out, 1); err != nil {
			return err
		}
		if o.version == "" || o.namespace == "" {
			return fmt.Errorf("sbom: -version and -namespace are required")
		}
		var err error
		if o.created, err = time.Parse(time.RFC3339, *created); err != nil {
			return fmt.Errorf("sbom: -created: %w", err)
		}
		doc, err := sbom(o, fs.Args())
		if err != nil {
			return err
		}
		if err := writeJSON(*out, doc); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown subcommand %s: want archive, krew or sbom", strconv.Quote(args[0]))
	}
	_, err := fmt.Fprintln(stdout, *out)
	return err
}

func parse(fs *flag.FlagSet, args []string, out *string, minArgs int) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("%s: -out is required", fs.Name())
	}
	if fs.NArg() < minArgs {
		return fmt.Errorf("%s: want at least %d file", fs.Name(), minArgs)
	}
	return nil
}

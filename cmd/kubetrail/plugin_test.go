package main

import (
	"strings"
	"testing"
)

// Installed as kubectl-trail, the command is `kubectl trail`: kubectl runs the binary with the
// rest of the command line, flags before or after the object, TYPE/NAME or TYPE NAME, and trace
// is the default.
func TestAsKubectlPluginFlagsMayComeFirstAndUsageSaysKubectlTrail(t *testing.T) {
	src := "file=" + recordedFile(t, "deployment")
	const plugin = "/home/u/.krew/bin/kubectl-trail"
	for _, args := range [][]string{
		{"-n", "default", "--source", src, "deploy/demo"},
		{"deploy/demo", "-n", "default", "--source", src},
		{"--source", src, "deploy/demo", "-n", "default", "-o", "tree"},
		{"trace", "-n", "default", "deploy/demo", "--source", src},
		{"deploy", "demo", "--namespace", "default", "--source=" + src, "--output=tree"},
		{"deployments.apps", "--source", src, "demo"}, // the namespace: "default" with no kubeconfig
		{"trace", "-ndefault", "deployment", "demo", "--source", src},
		{"deploy/demo", "--source", src, "-v=1"}, // a shorthand with '=' is not a long flag with one dash
	} {
		code, out, errOut := invoke(t, plugin, args...)
		if code != 0 || !strings.HasPrefix(out, "Deployment default/demo in cluster testbed") {
			t.Errorf("kubectl-trail %s: exit %d: %s%s", strings.Join(args, " "), code, errOut, head(out, 2))
		}
	}

	usageCases := []struct {
		args       []string
		code       int
		stdout     bool
		want, lack string
	}{
		{nil, 2, false, "\n  kubectl trail (TYPE/NAME | TYPE NAME) [options]\n  kubectl trail [command] [options]\n", "kubetrail trace"},
		{[]string{"--help"}, 0, true, "Use \"kubectl trail <command> --help\" for more information", "kubetrail trace"},
		{[]string{"-n", "default", "--source", src, "-h"}, 0, true, "Usage:\n  kubectl trail (TYPE/NAME | TYPE NAME) [--source jaeger=URL|file=PATH] [options]\n", "kubetrail trace"},
		{[]string{"deploy/demo", "--help"}, 0, true, "  kubectl trail deploy/web --cluster prod-eu-1", "kubectl trail trace"},
		{[]string{"trace", "--help"}, 0, true, "  kubectl trail trace deploy/web --cluster prod-eu-1", "kubetrail trace"},
		{[]string{"annotate", "-h"}, 0, true, "Usage:\n  kubectl trail annotate (TYPE/NAME | TYPE NAME) [options]\n", "kubetrail annotate"},
		{[]string{"apply", "-h"}, 0, true, "Usage:\n  kubectl trail apply -f (FILENAME | DIRECTORY | -) [--wait] [options]\n", "kubetrail apply"},
		{[]string{"apply", "--wait"}, 2, false, "kubectl trail: -f is required: a file, a directory of .yaml, .yml and .json files, or - for stdin\nSee 'kubectl trail apply -h' for help and examples.", "kubetrail"},
		{[]string{"-n", "default", "deploy/demo"}, 2, false, "kubectl trail: --source is required", "kubetrail:"},
		{[]string{"-n", "default", "deploy/demo"}, 2, false, "See 'kubectl trail -h' for help and examples.", "kubetrail"},
		{[]string{"annotate", "deploy/demo", "-x"}, 2, false, "kubectl trail: unknown shorthand flag: 'x' in -x\nSee 'kubectl trail annotate -h' for help and examples.", "kubetrail"},
	}
	for _, tc := range usageCases {
		t.Setenv("KUBETRAIL_SOURCE", "")
		code, out, errOut := invoke(t, plugin, tc.args...)
		text := errOut
		if tc.stdout {
			text = out
		}
		if code != tc.code || !strings.Contains(text, tc.want) || strings.Contains(text, tc.lack) {
			t.Errorf("kubectl-trail %s: exit %d (want %d), output lacks %q or has %q:\n%s", strings.Join(tc.args, " "), code, tc.code, tc.want, tc.lack, text)
		}
	}

	// On Windows the binary is kubectl-trail.exe; as kubetrail, an object is not a command.
	if code, _, errOut := invoke(t, "/opt/bin/kubectl-trail.exe", "-n", "default", "--source", src, "deploy/demo"); code != 0 {
		t.Errorf("kubectl-trail.exe: exit %d: %s", code, errOut)
	}
	if code, _, errOut := invoke(t, "/usr/local/bin/kubetrail", "-n", "default", "deploy/demo"); code != 2 || !strings.Contains(errOut, `kubetrail: unknown command "-n"`) {
		t.Errorf("kubetrail -n default deploy/demo: exit %d: %s", code, errOut)
	}
}

// The help is laid out as kubectl's: a description, Examples, Options in groups (each flag as
// "-o, --output='tree':" with its text on the next line), Usage last.
func TestHelpIsLaidOutAsKubectls(t *testing.T) {
	for _, args := range [][]string{{"trace", "-h"}, {"annotate", "--help"}, {"apply", "-h"}, {"completion", "-h"}} {
		code, out, errOut := kubetrail(t, args...)
		if code != 0 || errOut != "" {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		last := -1
		for _, heading := range []string{"\nExamples:\n  # ", "\nOptions:\n  ", "\n    -h, --help=false:\n\tShow this help.\n", "\nUsage:\n  kubetrail " + args[0] + " "} {
			i := strings.Index(out, heading)
			if i <= last {
				t.Fatalf("%v: %q missing or out of order:\n%s", args, heading, out)
			}
			last = i
		}
	}
	_, out, _ := kubetrail(t, "trace", "-h")
	for _, want := range []string{
		"  Cluster (read for the object's UID and owners; the backend is searched when it cannot be):\n    --kubeconfig='':\n",
		"    -n, --namespace='':\n\tThe object's namespace (default: the kubeconfig context's, then \"default\"; ignored for\n",
		"    -o, --output='tree':\n\tOutput format: tree, timeline, json or html.\n",
		"    --window=30m0s:\n", "    --depth=-1:\n", "    --generation=0:\n", "    -v, --v=0:\n",
		"    --cluster='':\n", "$KUBETRAIL_CLUSTER", "    --source='':\n", "$KUBETRAIL_SOURCE",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("trace -h lacks %q", want)
		}
	}
}

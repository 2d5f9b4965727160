package main

import (
	"strings"
	"testing"
)

// Installed as kubectl-trail, the command is `kubectl trail`: kubectl runs the binary with the
// rest of the command line, flags before or after the object, and trace is the default.
func TestAsKubectlPluginFlagsMayComeFirstAndUsageSaysKubectlTrail(t *testing.T) {
	src := "file=" + recordedFile(t, "deployment")
	const plugin = "/home/u/.krew/bin/kubectl-trail"
	for _, args := range [][]string{
		{"-n", "default", "--source", src, "deploy/demo"},
		{"deploy/demo", "-n", "default", "--source", src},
		{"--source", src, "deploy/demo", "-n", "default", "-o", "tree"},
		{"trace", "-n", "default", "deploy/demo", "--source", src},
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
		{nil, 2, false, "  kubectl trail KIND/NAME -n NAMESPACE", "kubetrail trace"},
		{[]string{"--help"}, 0, true, "Run \"kubectl trail -h\" or \"kubectl trail annotate -h\"", "kubetrail trace"},
		{[]string{"-n", "default", "--source", src, "-h"}, 0, false, "Usage: kubectl trail KIND/NAME", "kubetrail trace"},
		{[]string{"annotate", "-h"}, 0, false, "Usage: kubectl trail annotate KIND/NAME", "kubetrail annotate"},
		{[]string{"-n", "default", "deploy/demo"}, 2, false, "kubectl trail: --source is required", "kubetrail:"},
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

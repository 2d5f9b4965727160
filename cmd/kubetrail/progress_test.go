package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"
)

// fakeTicker is a progressClock driven by hand: each tick is sent when the test says, with the
// time it says.
type fakeTicker struct {
	start   time.Time
	c       chan time.Time
	stopped bool
}

func (f *fakeTicker) clock() progressClock {
	return progressClock{
		now: func() time.Time { return f.start },
		newTicker: func(time.Duration) (<-chan time.Time, func()) {
			return f.c, func() { f.stopped = true }
		},
	}
}

// tick sends one tick at start+d; the channel is unbuffered, so the previous tick was received.
func (f *fakeTicker) tick(d time.Duration) { f.c <- f.start.Add(d) }

// settle returns once the last tick is drawn: a tick at the start draws nothing, and is received
// only when the line's goroutine is back waiting.
func (f *fakeTicker) settle() { f.tick(0) }

// lockedBuffer is a terminal's screen as bytes: the progress line's goroutine writes to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// On a terminal, nothing is drawn during the first second; then one line, rewritten in place
// each tick; a message meanwhile erases it first; at the end it is erased.
func TestTheProgressLineAppearsAfterASecondUpdatesInPlaceAndIsErased(t *testing.T) {
	ft := &fakeTicker{start: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC), c: make(chan time.Time)}
	var screen lockedBuffer
	p := startProgress(&screen, "querying jaeger at http://jaeger:16686", true, ft.clock())
	ft.tick(500 * time.Millisecond)
	ft.tick(999 * time.Millisecond)
	ft.tick(time.Second)
	ft.tick(2 * time.Second)
	ft.tick(2*time.Second + 500*time.Millisecond)
	ft.settle()
	_, _ = io.WriteString(p, "kubetrail: fetched 3 traces\n")
	ft.tick(12 * time.Second)
	p.stop()
	line := func(s string) string { return "\rquerying jaeger at http://jaeger:16686… " + s }
	n := len([]rune(line("1 s"))) - 1 // without the \r
	erase := "\r" + strings.Repeat(" ", n) + "\r"
	want := line("1 s") + line("2 s") + line("2 s") + erase + "kubetrail: fetched 3 traces\n" + line("12 s") + "\r" + strings.Repeat(" ", n+1) + "\r"
	if got := screen.String(); got != want {
		t.Fatalf("the terminal got\n%q\nwant\n%q", got, want)
	}
	if !ft.stopped {
		t.Fatal("the ticker was not stopped")
	}
}

func TestTheProgressLineIsNotDrawnWhenOff(t *testing.T) {
	ft := &fakeTicker{start: time.Now(), c: make(chan time.Time)}
	var out lockedBuffer
	p := startProgress(&out, "querying jaeger at http://jaeger:16686", false, ft.clock())
	select {
	case ft.c <- ft.start.Add(5 * time.Second):
		t.Fatal("a progress that is off reads its ticker")
	case <-time.After(50 * time.Millisecond):
	}
	_, _ = io.WriteString(p, "warning: x\n")
	p.stop()
	if out.String() != "warning: x\n" {
		t.Fatalf("got %q", out.String())
	}
}

// Only a terminal gets the line: a buffer, a file, /dev/null and a pipe do not.
func TestOnlyATerminalIsATerminal(t *testing.T) {
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	file, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for name, wr := range map[string]io.Writer{"a buffer": &bytes.Buffer{}, "/dev/null": devnull, "a pipe": w, "a file": file} {
		if terminal(wr) {
			t.Errorf("%s is taken for a terminal", name)
		}
	}
}

// slowJaeger serves the recorded deployment scenario as Jaeger would, each answer after delay.
func slowJaeger(t *testing.T, delay time.Duration) string {
	t.Helper()
	td, err := golden.ReadTraces(filepath.Join(recorded, "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	fast, _ := url.Parse(newFakeJaeger(t, td).URL)
	proxy := httputil.NewSingleHostReverseProxy(fast)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(delay)
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// fastProgress draws the line after 10 ms, every 10 ms, for the duration of the test.
func fastProgress(t *testing.T) {
	delay, tick := progressDelay, progressTick
	progressDelay, progressTick = 10*time.Millisecond, 10*time.Millisecond
	t.Cleanup(func() { progressDelay, progressTick = delay, tick })
}

// Through the command: a writer that is a terminal gets the line while a slow Jaeger answers,
// erased before the tree is printed; -o json and a writer that is not a terminal get none.
func TestTraceDrawsTheProgressLineOnlyOnATerminalAndNotForJSON(t *testing.T) {
	fastProgress(t)
	src := "jaeger=" + slowJaeger(t, 100*time.Millisecond)
	args := []string{"trace", "deployment/demo", "-n", "default", "--cluster", "testbed", "--source", src,
		"--since", "2026-11-21T10:00:00Z", "--until", "2026-11-21T11:30:00Z"}

	code, out, errOut := kubetrail(t, args...)
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "Deployment default/demo") {
		t.Fatalf("not a terminal: exit %d, stderr %q", code, errOut)
	}

	prev := terminal
	t.Cleanup(func() { terminal = prev })
	terminal = func(io.Writer) bool { return true }
	code, out, errOut = kubetrail(t, args...)
	if code != 0 || !strings.HasPrefix(out, "Deployment default/demo") {
		t.Fatalf("a terminal: exit %d, stderr %q", code, errOut)
	}
	label := "\rquerying jaeger at " + strings.TrimPrefix(src, "jaeger=") + "… 0 s"
	if !strings.HasPrefix(errOut, label) {
		t.Fatalf("a terminal: stderr %q, want the progress line first", errOut)
	}
	n := len([]rune(label)) - 1
	if !strings.HasSuffix(errOut, "\r"+strings.Repeat(" ", n)+"\r") {
		t.Fatalf("a terminal: stderr %q does not end erasing the line", errOut)
	}
	if code, _, errOut = kubetrail(t, append(args, "-o", "json")...); code != 0 || errOut != "" {
		t.Fatalf("-o json on a terminal: exit %d, stderr %q: want nothing", code, errOut)
	}
}

// ptyHelperEnv makes TestPtyHelperProcess run the command, under the pseudo-terminal that
// TestTheProgressLineOnARealTerminal makes with script(1).
const ptyHelperEnv = "KUBETRAIL_TEST_PTY_SOURCE"

// TestPtyHelperProcess is not a test of its own: run by TestTheProgressLineOnARealTerminal as a
// child process, it is the command with the real os.Stderr, the line drawn after 10 ms.
func TestPtyHelperProcess(t *testing.T) {
	src := os.Getenv(ptyHelperEnv)
	if src == "" {
		return
	}
	progressDelay, progressTick = 10*time.Millisecond, 10*time.Millisecond
	args := []string{"kubetrail", "trace", "deployment/demo", "-n", "default", "--cluster", "testbed", "--source", src,
		"--since", "2026-11-21T10:00:00Z", "--until", "2026-11-21T11:30:00Z"}
	args = append(args, strings.Fields(os.Getenv(ptyHelperEnv+"_ARGS"))...)
	os.Exit(run(context.Background(), args, os.Stdout, os.Stderr))
}

// On a real pseudo-terminal (script(1) makes one) the command finds stderr a terminal and draws
// the line; through a pipe it does not.
func TestTheProgressLineOnARealTerminal(t *testing.T) {
	script, err := exec.LookPath("script")
	if err != nil {
		t.Fatal("script(1) (util-linux) is not installed: it makes the pseudo-terminal of this test")
	}
	src := "jaeger=" + slowJaeger(t, 100*time.Millisecond)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := func(viaPty bool, extra string) (string, string) {
		t.Helper()
		helper := self + " -test.run=^TestPtyHelperProcess$"
		var cmd *exec.Cmd
		if viaPty {
			// -q: no banner; -e: the child's exit status; the typescript goes to /dev/null and
			// the terminal's output to stdout.
			cmd = exec.Command(script, "-qec", helper, os.DevNull)
		} else {
			cmd = exec.Command(self, "-test.run=^TestPtyHelperProcess$")
		}
		cmd.Env = append(os.Environ(), ptyHelperEnv+"="+src, ptyHelperEnv+"_ARGS="+extra)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %v\n%s%s", cmd.Args, err, stdout.String(), stderr.String())
		}
		return stdout.String(), stderr.String()
	}

	screen, _ := child(true, "")
	label := "querying jaeger at " + strings.TrimPrefix(src, "jaeger=") + "… 0 s"
	if !strings.Contains(screen, "\r"+label) {
		t.Fatalf("the terminal shows no progress line:\n%q", screen)
	}
	erase := "\r" + strings.Repeat(" ", len([]rune(label))) + "\r"
	i := strings.LastIndex(screen, erase)
	if i < 0 || !strings.HasPrefix(screen[i+len(erase):], "Deployment default/demo") {
		t.Fatalf("the line is not erased before the tree:\n%q", screen)
	}
	if screen, _ = child(true, "-o json"); strings.Contains(screen, "querying") {
		t.Fatalf("-o json on a terminal drew the line:\n%q", screen)
	}
	out, errOut := child(false, "")
	if !strings.HasPrefix(out, "Deployment default/demo") || strings.Contains(errOut, "querying") {
		t.Fatalf("through a pipe: stderr %q", errOut)
	}
}

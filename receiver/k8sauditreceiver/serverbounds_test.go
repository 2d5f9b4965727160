package k8sauditreceiver

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// guard bounds how long a test waits for something that must happen; it is a hang guard, never
// what decides a pass: the assertions are about what the connection says, not when.
const guard = 10 * time.Second

// idleTimeoutOf is the keep-alive idle timeout confighttp will apply: the keepalive section
// when it has a value (set programmatically, or with the prioritizing feature gate), else the
// flat field that Unmarshal folds the section into.
func idleTimeoutOf(cfg *Config) time.Duration {
	if ka := cfg.ServerConfig.Keepalive.Get(); ka != nil {
		return ka.IdleTimeout
	}
	return cfg.ServerConfig.IdleTimeout //nolint:staticcheck // what ToServer reads while the section is unset
}

func TestDefaultConfigBoundsEveryRead(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	sc := cfg.ServerConfig
	if sc.ReadHeaderTimeout != 10*time.Second {
		t.Errorf("read_header_timeout = %s, want 10s", sc.ReadHeaderTimeout)
	}
	if sc.ReadTimeout != time.Minute {
		t.Errorf("read_timeout = %s, want 1m: without it a slow body holds a connection forever", sc.ReadTimeout)
	}
	if got := idleTimeoutOf(cfg); got != 2*time.Minute {
		t.Errorf("idle timeout = %s, want 2m (longer than the apiserver client's 90s)", got)
	}
}

// dialAndSend opens a raw connection to the webhook and writes the headers of a POST whose
// body is declared far longer than what is then sent.
func dialAndSend(t *testing.T, url string, declared int, body string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", url[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	req := "POST /audit HTTP/1.1\r\nHost: kubetrail\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(declared) + "\r\n\r\n" + body
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	return conn
}

// readUntilClosed reads what the server answers until it closes the connection, and returns
// the answer's status code (0 when it closed without answering). It fails the test if the
// connection is still open after the guard.
func readUntilClosed(t *testing.T, conn net.Conn) int {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(guard)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	code := 0
	if resp, err := http.ReadResponse(br, nil); err == nil {
		code = resp.StatusCode
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	} else if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		t.Fatal("the server neither answered nor closed the connection")
	}
	_, err := br.ReadByte()
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		t.Fatalf("the server answered %d but kept the connection open", code)
	}
	if err == nil {
		t.Fatalf("the server sent more than one answer (status %d first)", code)
	}
	return code
}

func TestASlowBodyIsCutAtTheReadTimeout(t *testing.T) {
	env := startWebhook(t, func(cfg *Config) { cfg.ServerConfig.ReadTimeout = 300 * time.Millisecond })
	conn := dialAndSend(t, env.url, 1<<20, `{"kind":"EventList",`)
	// Dribble a byte every 50 ms: each byte arrives well within any per-read deadline, so only
	// a bound on the whole request can end it.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	code := readUntilClosed(t, conn)
	t.Logf("answered %d, then closed", code)
	close(stop)
	<-done
	if code >= 200 && code < 300 {
		t.Fatalf("a body cut at the read timeout was answered %d", code)
	}
	if n := env.next.spans(); n != 0 {
		t.Fatalf("%d spans from a body that never arrived", n)
	}
}

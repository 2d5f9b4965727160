package k8sauditreceiver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/config/confighttp"
	"go.uber.org/zap"
	"golang.org/x/net/http2"

	"github.com/kubetrail/kubetrail/internal/auditconv"
)

// listen opens the webhook's listener: at most max_connections connections at once, and with
// tls, a handshake that refuses a client certificate whose names are not in
// allowed_client_names, before a byte of the request is read. It does what confighttp's
// ToListener does (the address, TLS with h2 and http/1.1), with those two bounds added below
// and inside the handshake.
func (r *auditReceiver) listen(ctx context.Context, sc *confighttp.ServerConfig) (net.Listener, error) {
	ln, err := sc.NetAddr.Listen(ctx)
	if err != nil {
		return nil, err
	}
	limited := &connLimit{Listener: ln, max: int64(r.cfg.MaxConnections), refused: func() {
		r.telemetry.K8sAuditRefusedConnections.Add(context.Background(), 1, auditconv.WithReason(reasonTooManyConnections))
	}}
	r.conns, ln = limited, limited
	if !sc.TLS.HasValue() {
		return ln, nil
	}
	tlsCfg, err := sc.TLS.Get().LoadTLSConfig(ctx)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	tlsCfg.NextProtos = []string{http2.NextProtoTLS, "http/1.1"}
	if len(r.cfg.AllowedClientNames) > 0 {
		verify := r.verifyClientName(r.cfg.AllowedClientNames)
		tlsCfg.VerifyConnection = verify
		if perClient := tlsCfg.GetConfigForClient; perClient != nil {
			// reload_client_ca_file: each handshake gets a config with the CA file as it
			// is now; it must check the names too.
			tlsCfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
				c, err := perClient(hello)
				if c != nil {
					c.VerifyConnection = verify
				}
				return c, err
			}
		}
	}
	return tls.NewListener(ln, tlsCfg), nil
}

// errClientNotAllowed fails the TLS handshake of a client whose certificate the CA signed for a
// name allowed_client_names does not list.
var errClientNotAllowed = errors.New("client certificate not in allowed_client_names")

// verifyClientName checks, in the TLS handshake, that the verified client certificate has one
// of the allowed names as its common name or as a DNS name (exactly). tls.client_ca_file alone
// makes the handshake require a certificate the CA signed, whichever name it carries: with a
// cluster CA that is every kubelet and every component. Checked here, a client of another name
// never gets to send headers or a body: 600 such clients each holding an unfinished 1 MB header
// held 1.45 GB when the name was checked by the handler.
func (r *auditReceiver) verifyClientName(allowed []string) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if clientNameAllowed(cs, allowed) {
			return nil
		}
		r.telemetry.K8sAuditRefusedConnections.Add(context.Background(), 1, auditconv.WithReason(reasonClientNotAllowed))
		if len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0 {
			leaf := cs.VerifiedChains[0][0]
			r.set.Logger.Debug("Audit webhook client refused in the TLS handshake",
				zap.String("common_name", leaf.Subject.CommonName), zap.Strings("dns_names", leaf.DNSNames))
			return fmt.Errorf("%w: CN=%q DNS=%q", errClientNotAllowed, leaf.Subject.CommonName, leaf.DNSNames)
		}
		return errClientNotAllowed
	}
}

// clientNameAllowed reports whether the leaf of the verified chain names an allowed client.
func clientNameAllowed(cs tls.ConnectionState, allowed []string) bool {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return false
	}
	leaf := cs.VerifiedChains[0][0]
	if slices.Contains(allowed, leaf.Subject.CommonName) {
		return true
	}
	for _, n := range leaf.DNSNames {
		if slices.Contains(allowed, n) {
			return true
		}
	}
	return false
}

// connLimit is a listener that keeps at most max connections open: one past it is closed as
// soon as it is accepted, before a byte is read from it, and counted. Each open connection
// holds memory outside max_in_flight_bytes (buffers, a goroutine, its headers while they
// arrive, within max_header_bytes); the bound makes that sum finite. Closing instead of leaving
// the connection in the kernel's backlog tells the client at once, and the apiserver retries.
type connLimit struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused func()
}

func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			// Counted before the close: whoever sees the connection closed sees it counted.
			l.refused()
			_ = c.Close()
			continue
		}
		return &limitedConn{Conn: c, l: l}, nil
	}
}

// openConnections is how many connections the listener holds open, for tests.
func (l *connLimit) openConnections() int64 { return l.open.Load() }

type limitedConn struct {
	net.Conn
	l    *connLimit
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}

// bodyRateGrace is how long a body may take to start arriving before min_body_rate applies:
// the client's first write, a 100-continue's round trip.
const bodyRateGrace = 2 * time.Second

// bodyRate cuts a request body that arrives slower than min_body_rate. What counts is the time
// the server spends waiting for the body's bytes (blocked in a read), not the time since the
// request began: a server that reads slowly (decompressing, its CPU busy) must not blame its
// client. Within that waiting time, bodyRateGrace is free, and each byte received buys
// 1/rate s more. A watchdog timer checks when what was received would stop being enough; if
// the server is then still waiting, it ends the body's read at once (a read deadline in the
// past, as a shutdown does: it only ever sets that one, so it never undoes a shutdown's cut),
// and the handler's read fails. A thousand senders of a byte a second would otherwise each hold
// their connection, goroutine, decoder and reservation for the whole read_timeout.
type bodyRate struct {
	r    io.ReadCloser
	rc   *http.ResponseController
	rate int64

	mu      sync.Mutex
	got     int64
	waited  time.Duration // in reads that have returned
	reading time.Time     // when the read in progress began; zero between reads
	done    bool
	timer   *time.Timer
	cut     atomic.Bool
}

type bodyRateKey struct{}

// bodyCutForRate reports whether the request's body was cut for arriving below min_body_rate.
func bodyCutForRate(ctx context.Context) bool {
	b, ok := ctx.Value(bodyRateKey{}).(*bodyRate)
	return ok && b.cut.Load()
}

func (b *bodyRate) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.done && b.cut.Load() {
		b.mu.Unlock()
		return 0, os.ErrDeadlineExceeded
	}
	b.reading = time.Now()
	b.mu.Unlock()
	n, err := b.r.Read(p)
	b.mu.Lock()
	b.waited += time.Since(b.reading)
	b.reading = time.Time{}
	b.got += int64(n)
	if err != nil {
		b.stopLocked()
	}
	b.mu.Unlock()
	return n, err
}

func (b *bodyRate) Close() error {
	b.stop()
	return b.r.Close()
}

// stop ends the watch: the body has ended, or its request has.
func (b *bodyRate) stop() {
	b.mu.Lock()
	b.stopLocked()
	b.mu.Unlock()
}

func (b *bodyRate) stopLocked() {
	b.done = true
	b.timer.Stop()
}

// check cuts the body if the server has waited for it longer than what was received allows and
// is waiting still; otherwise it looks again when that could next be so.
func (b *bodyRate) check() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return
	}
	allowed := bodyRateGrace + time.Duration(float64(b.got)/float64(b.rate)*float64(time.Second))
	waited := b.waited
	if !b.reading.IsZero() {
		waited += time.Since(b.reading)
	}
	if left := allowed - waited; left > 0 || b.reading.IsZero() {
		b.timer.Reset(max(left, 100*time.Millisecond))
		return
	}
	b.done = true
	b.cut.Store(true)
	_ = b.rc.SetReadDeadline(time.Unix(1, 0))
}

// respectsBodyRate wraps the whole server handler, outermost, with the min_body_rate watchdog:
// a compressed body's rate is that of its bytes as sent, and chargesDecoders' drain of the rest
// of a refused body is watched too. The watch ends with the request: net/http closes the body
// it made, not this wrapper, and a timer left running would cut the connection's next request.
func (w *webhook) respectsBodyRate(next http.Handler, rate int64) http.Handler {
	if rate <= 0 {
		return next
	}
	return http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		if req.Body == nil || req.Body == http.NoBody {
			next.ServeHTTP(rw, req)
			return
		}
		b := &bodyRate{r: req.Body, rc: http.NewResponseController(rw), rate: rate}
		b.mu.Lock()
		b.timer = time.AfterFunc(bodyRateGrace, b.check)
		b.mu.Unlock()
		defer b.stop()
		req = req.WithContext(context.WithValue(req.Context(), bodyRateKey{}, b))
		req.Body = b
		next.ServeHTTP(rw, req)
	})
}

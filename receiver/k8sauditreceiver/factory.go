package k8sauditreceiver

import (
	"slices"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/confighttp"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/receiver"

	"github.com/kubetrail/kubetrail/internal/auditconv"
	"github.com/kubetrail/kubetrail/receiver/k8sauditreceiver/internal/metadata"
)

const (
	defaultEndpoint = "localhost:9880"
	// A quarter second keeps file mode's added latency below the apiserver's own webhook
	// batching (--audit-webhook-batch-max-wait) while costing one stat per file per tick.
	defaultPollInterval = 250 * time.Millisecond
	// defaultMaxRequestBodySize is confighttp's limit when max_request_body_size is not set.
	defaultMaxRequestBodySize = 20 << 20
	// defaultMaxInFlightBytes lets three bodies of the largest default size, of the
	// apiserver's default 400 events each, be read and decoded at once. The apiserver posts
	// one batch at a time per webhook backend, of --audit-webhook-batch-max-size events (400
	// by default, well under 1 MiB at Metadata level, a few MiB at RequestResponse), so a few
	// apiservers never meet it; a flood does, and is answered 429 instead of growing the heap.
	defaultMaxInFlightBytes = 64 << 20
	// defaultMaxHeaderBytes is far more than the apiserver's webhook client sends (its
	// headers are a few hundred bytes, a bearer token a few KB more), and 1/64 of Go's default
	// (1 MiB): a connection that holds an unfinished header holds about twice its size, and
	// 600 such connections held 1.45 GB at Go's default.
	defaultMaxHeaderBytes = 16 << 10
	// defaultMaxConnections is far more than apiservers open (one or a few each), and bounds
	// what connections hold besides their bodies: about 50 KB each while a header of the
	// largest size arrives (two copies of it, buffers, a goroutine), some 100 MB for all.
	defaultMaxConnections = 2048
	// defaultMinBodyRate is 32 kbit/s, far below any link between an apiserver and a collector,
	// and cuts within seconds what a byte-a-second sender would hold for the whole read_timeout.
	defaultMinBodyRate = 4 << 10
	// defaultMaxEventsPerRequest is 25 times the apiserver's default batch
	// (--audit-webhook-batch-max-size 400), so a raised batch size rarely meets it, and a
	// 20 MiB body of real events (half a KiB each at Metadata level) holds some 40,000. Its
	// events cost 20 MiB (auditconv.EventBytes each): a largest body with the most events
	// fits the default max_in_flight_bytes at once, where a million two-byte items would hold
	// 2 GB.
	defaultMaxEventsPerRequest = 10_000

	// Webhook read bounds, so that a client that sends slowly or not at all cannot hold a
	// connection (and the memory of its half-read body) forever. None is ever reached by a
	// kube-apiserver: its webhook client writes the headers at once, gives up on a request
	// after 30 s (k8s.io/apiserver's webhook request timeout) and posts at most
	// --audit-webhook-batch-max-size events, within max_request_body_size (20 MiB: 60 s is a
	// floor of 350 KB/s, far below any link between an apiserver and a collector).
	defaultReadHeaderTimeout = 10 * time.Second
	defaultReadTimeout       = time.Minute
	// defaultWriteTimeout bounds a request from its headers to the end of its answer. Go's
	// server sets the write deadline when the headers are read, so an answer written after it
	// is lost: with confighttp's 30 s, a body cut at the 1-minute read_timeout got no 400, only
	// its connection closed. Twice read_timeout leaves the pipeline a minute after a body that
	// arrives at the last moment (the apiserver gives up after 30 s itself).
	defaultWriteTimeout = 2 * defaultReadTimeout
	// Longer than the idle timeout of the apiserver's HTTP client (90 s, Go's default that
	// client-go keeps), so the client always closes an idle connection first and never posts a
	// batch on a connection the server is closing at that instant: Go's transport does not retry
	// a POST that fails that way, and the batch would wait for the webhook backend's backoff.
	defaultIdleTimeout = 2 * time.Minute
)

// NewFactory returns the factory of the k8s_audit receiver.
func NewFactory() receiver.Factory {
	return receiver.NewFactory(
		metadata.Type,
		createDefaultConfig,
		receiver.WithTraces(createTraces, metadata.TracesStability),
		receiver.WithLogs(createLogs, metadata.LogsStability))
}

func createDefaultConfig() component.Config {
	server := confighttp.NewDefaultServerConfig()
	server.NetAddr.Endpoint = defaultEndpoint
	server.ReadHeaderTimeout = defaultReadHeaderTimeout
	server.ReadTimeout = defaultReadTimeout
	server.WriteTimeout = defaultWriteTimeout
	server.CompressionAlgorithms = slices.Clone(defaultCompressionAlgorithms)
	if ka := server.Keepalive.Get(); ka != nil {
		ka.IdleTimeout = defaultIdleTimeout
	} else {
		server.Keepalive = configoptional.Some(confighttp.KeepaliveServerConfig{IdleTimeout: defaultIdleTimeout})
	}
	return &Config{
		ServerConfig:        server,
		MaxInFlightBytes:    defaultMaxInFlightBytes,
		MaxEventsPerRequest: defaultMaxEventsPerRequest,
		MaxHeaderBytes:      defaultMaxHeaderBytes,
		MaxConnections:      defaultMaxConnections,
		MinBodyRate:         defaultMinBodyRate,
		PollInterval:        defaultPollInterval,
		StartAt:             startAtEnd,
		Conversion:          auditconv.DefaultSettings(),
	}
}

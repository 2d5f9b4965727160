package k8sauditreceiver

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
)

// defaultCompressionAlgorithms are the Content-Encodings the webhook accepts unless
// compression_algorithms says otherwise: none (the apiserver's webhook client sends its batches
// uncompressed) and gzip, whose decoder holds 40 KB. confighttp's own default adds zstd, lz4 and
// snappy, whose decoders hold up to max_request_body_size each before a byte reaches the
// handler: sixty zstd bombs of 65 KB held 1.2 GB.
var defaultCompressionAlgorithms = []string{"", "gzip"}

// knownEncodings are the Content-Encodings confighttp can decode, and "identity", which it reads
// as none.
var knownEncodings = []string{"", "identity", "gzip", "zlib", "deflate", "zstd", "lz4", "snappy", "x-snappy-framed"}

// confighttpEncodings is confighttp's compression_algorithms when the key is null.
var confighttpEncodings = []string{"", "gzip", "zstd", "zlib", "snappy", "deflate", "lz4", "x-snappy-framed"}

// zstdMaxWindow is the zstd library's largest window on 64-bit platforms (zstd.MaxWindowSize),
// confighttp's cap on the window it lets a frame declare.
const zstdMaxWindow = 1 << 29

// decoderBytes is what a request's decoder holds for a Content-Encoding, charged to
// max_in_flight_bytes before the decoder is made, with a webhook body limit of maxBody bytes;
// measured with runtime/metrics on decoders part way through a bomb. The decompressed bytes are
// charged besides, as they arrive (readBody).
//   - gzip, zlib, deflate: flate's 32 KiB window and tables, 40 KB.
//   - zstd: the window the frame declares, which confighttp bounds at max_request_body_size
//     (at least 8 MiB, the default encoders' window, at most 512 MiB), and 0.4 MB of blocks: a
//     16 MiB window held 16.4 MiB.
//   - lz4: two blocks of the largest size a frame may declare (4 MiB), 7.6 MiB.
//   - x-snappy-framed: two 64 KiB blocks, 144 KB.
//   - snappy (block format): confighttp reads the whole compressed body (up to
//     max_request_body_size, and as much again while its buffer grows) and decodes it whole
//     (up to max_request_body_size) before the handler reads anything.
func decoderBytes(encoding string, maxBody int64) int64 {
	switch encoding {
	case "gzip", "zlib", "deflate":
		return 64 << 10
	case "zstd":
		return min(max(maxBody, 8<<20), zstdMaxWindow) + 1<<20
	case "lz4":
		return 8 << 20
	case "x-snappy-framed":
		return 256 << 10
	case "snappy":
		return 3 * maxBody
	}
	return 0
}

// costliestDecoder is the encoding among encodings (confighttp's when nil) whose decoder holds the
// most, and what it holds.
func costliestDecoder(encodings []string, maxBody int64) (string, int64) {
	if encodings == nil {
		encodings = confighttpEncodings
	}
	var name string
	var most int64
	for _, e := range encodings {
		if n := decoderBytes(e, maxBody); n > most {
			name, most = e, n
		}
	}
	return name, most
}

// reservationKey carries, in a request's context, the reservation chargesDecoders made for it,
// which the handler goes on growing.
type reservationKey struct{}

// chargesDecoders wraps the whole server handler, outside confighttp's decompression, which
// makes each request's decoder before the webhook's handler runs. A request with a
// Content-Encoding the webhook accepts is charged its decoder's memory (decoderBytes) to
// max_in_flight_bytes first; when the budget cannot spare it, the request is answered 429 and
// no decoder is made. A compressed body is then read to its end (at most limit bytes, as sent)
// before the answer goes out: the decompressed body stops at max_request_body_size, and
// confighttp closes the compressed one there; a gzip bomb answered 413 with most of its
// compressed bytes unread had its connection closed under the client's write and reset, the
// 413 lost. Its bytes are read and dropped, no more than the sender may send anyway; a
// compressed body longer than limit as sent is still cut there.
func (w *webhook) chargesDecoders(next http.Handler, limit int64, encodings []string) http.Handler {
	if encodings == nil {
		encodings = confighttpEncodings
	}
	return http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		encoding := req.Header.Get("Content-Encoding")
		if encoding == "" || req.Body == nil || req.Body == http.NoBody {
			next.ServeHTTP(rw, req)
			return
		}
		raw := &keptOpen{r: req.Body}
		req.Body = raw
		defer func() {
			if rest := limit + 1 - raw.n; rest > 0 {
				_, _ = io.Copy(io.Discard, io.LimitReader(raw.r, rest))
			}
			_ = raw.r.Close()
		}()
		if cost := decoderBytes(encoding, limit); cost > 0 && slices.Contains(encodings, encoding) {
			ctx := req.Context()
			res := &reservation{w: w, ctx: ctx}
			defer res.release()
			if !res.grow(cost) {
				// Read and drop the body first, as the deferred drain would after the
				// answer: a connection closed with compressed bytes unread is reset
				// under the client's write, and the 429 lost.
				if rest := limit + 1 - raw.n; rest > 0 {
					n, _ := io.Copy(io.Discard, io.LimitReader(raw.r, rest))
					raw.n += n
				}
				w.busy(ctx, rw, fmt.Sprintf("no room for a %s decoder (%d bytes)", encoding, cost))
				return
			}
			res.floor = res.held
			req = req.WithContext(context.WithValue(ctx, reservationKey{}, res))
		}
		next.ServeHTTP(rw, req)
	})
}

// keptOpen is a request body whose Close waits for chargesDecoders.
type keptOpen struct {
	r io.ReadCloser
	n int64
}

func (k *keptOpen) Read(p []byte) (int, error) {
	n, err := k.r.Read(p)
	k.n += int64(n)
	return n, err
}

func (*keptOpen) Close() error { return nil }

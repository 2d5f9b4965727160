package main

import (
	"io"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc/encoding"
)

// The sink takes what the collector's otlp_grpc exporter may send besides gzip (registered by
// its import in main.go): zstd and snappy, in the formats the collector's configgrpc writes (a
// zstd frame, snappy's framed stream), so that COMPRESSION= in the bench scripts can compare
// them. Answers go back in the request's encoding, so each also compresses.
func init() {
	encoding.RegisterCompressor(zstdCompressor{})
	encoding.RegisterCompressor(snappyCompressor{})
}

type zstdCompressor struct{}

func (zstdCompressor) Name() string { return "zstd" }

func (zstdCompressor) Compress(w io.Writer) (io.WriteCloser, error) {
	return zstd.NewWriter(w, zstd.WithEncoderConcurrency(1))
}

func (zstdCompressor) Decompress(r io.Reader) (io.Reader, error) {
	d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	return zstdReader{d}, nil
}

// zstdReader releases the decoder's goroutines at the end of the stream.
type zstdReader struct{ d *zstd.Decoder }

func (z zstdReader) Read(p []byte) (int, error) {
	n, err := z.d.Read(p)
	if err == io.EOF {
		z.d.Close()
	}
	return n, err
}

type snappyCompressor struct{}

func (snappyCompressor) Name() string { return "snappy" }

func (snappyCompressor) Compress(w io.Writer) (io.WriteCloser, error) {
	return snappy.NewBufferedWriter(w), nil
}

func (snappyCompressor) Decompress(r io.Reader) (io.Reader, error) {
	return snappy.NewReader(r), nil
}

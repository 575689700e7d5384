package datasource

import (
	"context"
	"io"
)

// A Source produces the image bytes as received (compressed or not).
type Source interface {
	// Open starts reading from the beginning. Sources that cannot restart
	// (stdin) fail a second Open.
	Open(ctx context.Context) (*Stream, error)
	// String names the source for logs, with credentials redacted.
	String() string
}

// Stream is one pass over a source's bytes.
type Stream struct {
	// Body yields the bytes. The caller must Close it; closing also stops
	// any background work (the HTTP stall watchdog) tied to the stream.
	Body io.ReadCloser
	// Size is the total number of bytes when known (Content-Length, file or
	// block-device size), else -1.
	Size int64
	// LocalPath is set (absolute) when the bytes are a local regular file or
	// block device that qemu-img could read in place; "" otherwise.
	LocalPath string
	// Ranged, when not nil, says the bytes are also readable at random:
	// the server advertised byte ranges for an object of known size.
	// Ranged.Open reads it with the source's own client settings.
	Ranged *RangedURL
}

// RangedURL is an HTTP(S) object that can be read with Range requests.
type RangedURL struct {
	URL         string // after redirects
	InsecureTLS bool
	// Plain: nothing but the URL is needed to read it (no credentials,
	// extra headers or private CA), so another client (qemu-img's curl
	// driver) could read it too.
	Plain bool
	Size  int64

	src     *httpSource
	etag    string // strong ETag of the first response, pins every read
	lastMod string
}

package datasource

import (
	"context"
	"io"
)

// A Source produces the image bytes as received (compressed or not).
type Source interface {
	// Open starts reading from the beginning. Sources that cannot restart
	// (stdin) fail a second Open.
	Open(ctx context.Context) (*Transfer, error)
	// String names the source for logs, with credentials redacted.
	String() string
}

// Transfer is one pass over a source's bytes.
type Transfer struct {
	// Body yields the bytes. The caller must Close it; closing also stops
	// any background work (the HTTP stall watchdog) tied to the stream.
	Body io.ReadCloser
	// Size is the total number of bytes when known (Content-Length, file or
	// block-device size), else -1.
	Size int64
	// ContentType is the HTTP Content-Type of the answer ("" for other
	// sources or when the server sent none).
	ContentType string
	// Capabilities is what else the bytes allow, declared by the source
	// that opened them; the zero value is a forward-only stream that can be
	// opened again.
	Capabilities
	// Runs, when set, is Body's bytes as runs (NewRuns): the import reads
	// one or the other, never both. It takes the runs where it copies the
	// bytes as they are onto a raw target with no checksum of them to
	// compute, so zero runs reach the target as zeroed ranges.
	Runs Runs
}

// Capabilities is what a transfer's bytes allow beyond one forward read.
// Each source declares them in its Open; the engine chooses its route from
// them and never from the source's name or type.
type Capabilities struct {
	// LocalPath is the absolute path of a local regular file or block
	// device holding the bytes, which qemu-img can read in place ("" for
	// anything else).
	LocalPath string
	// Ranges is the object read at random over byte ranges, with the
	// source's own client settings: set when the server advertised ranges
	// for an object of known size, else nil.
	Ranges *RangedURL
	// OneTime: the bytes are gone once read, so opening the source again
	// does not read them from the start (standard input, an upload body, a
	// pipe named by a path) and an import of them cannot be started over.
	OneTime bool
	// HTTPAnswer: the bytes are the body of an HTTP answer (http(s), S3,
	// GCS), so a text body is a page the server returned; a registry
	// layer's file or a local file is "the source".
	HTTPAnswer bool
	// ReadAhead: the Body fetches ahead on goroutines of its own (an
	// object read over several connections at once), so a reader that
	// would only move the reading onto another goroutine adds a copy of
	// every byte and nothing runs sooner.
	ReadAhead bool
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

	src *httpSource
	pin objectPin // the first response's validators: every read is checked against them
}

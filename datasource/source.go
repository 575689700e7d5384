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
}

// LocalFile is implemented by a Transfer's Body when its bytes are a local
// regular file or block device that qemu-img could read in place.
type LocalFile interface {
	LocalPath() string // absolute
}

// RangeReadable is implemented by a Transfer's Body when its bytes are also
// readable at random: the server advertised byte ranges for an object of
// known size. RangedURL.Open reads it with the source's own client settings.
type RangeReadable interface {
	Ranges() *RangedURL
}

// LocalPath returns the local path of a transfer's bytes (see LocalFile),
// or "".
func LocalPath(t *Transfer) string {
	if l, ok := t.Body.(LocalFile); ok {
		return l.LocalPath()
	}
	return ""
}

// Ranges returns the range-readable object behind a transfer (see
// RangeReadable), or nil.
func Ranges(t *Transfer) *RangedURL {
	if r, ok := t.Body.(RangeReadable); ok {
		return r.Ranges()
	}
	return nil
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

// Replayable reports whether opening src again reads the same bytes from
// the start, so an import of t may be started over: not for a one-time
// stream (stdin, an upload body) nor for a pipe or character device read
// through a file path, whose bytes are gone once read.
func Replayable(src Source, t *Transfer) bool {
	switch src.(type) {
	case *readerSource:
		return false
	case *fileSource:
		return LocalPath(t) != ""
	}
	return true
}

// Package datasource hands the engine the image bytes exactly as a source
// delivers them (still compressed, if they were). Format detection and
// decompression happen in other packages; a source only knows how to start
// a byte stream and how much of it to expect.
package datasource

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/diskimport/engine/errdefs"
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

// schemeRe matches a URL scheme prefix ("s3://", "docker://") as RFC 3986
// defines scheme characters.
var schemeRe = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*)://`)

// New picks a source from an endpoint string the way a command line or an
// IMPORTER_ENDPOINT value is written: "-" is standard input, http(s) URLs
// go to NewHTTP, file:// URLs and plain paths to NewFile, and any other
// scheme is refused so that "s3://bucket/key" is never mistaken for a path.
func New(endpoint string, o HTTPOptions) (Source, error) {
	if endpoint == "-" {
		return NewReader("stdin", os.Stdin), nil
	}
	if IsRegistryRef(endpoint) {
		// docker://, oci-archive:, oci: — the latter two have no "//".
		return NewRegistry(endpoint, RegistryOptions{
			Username: o.Username, Password: o.Password, CertDir: o.CertDir, InsecureTLS: o.InsecureTLS, Logger: o.Logger,
		})
	}
	m := schemeRe.FindStringSubmatch(endpoint)
	if m == nil {
		if endpoint == "" {
			return nil, fmt.Errorf("empty source endpoint: %w", errdefs.ErrInvalidOptions)
		}
		return NewFile(endpoint), nil
	}
	switch scheme := strings.ToLower(m[1]); scheme {
	case "http", "https":
		return NewHTTP(endpoint, o)
	case "file":
		p := endpoint[len(m[0]):]
		if !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("file URL %q must hold an absolute path (file:///path): %w", endpoint, errdefs.ErrInvalidOptions)
		}
		return NewFile(p), nil
	default:
		return nil, fmt.Errorf("%s:// sources are not supported yet: %w", scheme, errdefs.ErrInvalidOptions)
	}
}

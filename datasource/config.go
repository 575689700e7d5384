package datasource

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/retry"
)

// Config is what every source is built with, whatever its scheme. A source
// uses the fields that apply to it and ignores the others, so one Config
// describes an import whether its endpoint is a URL, an image reference or
// a path. The zero value fetches anonymously with the defaults below.
type Config struct {
	// Access is how the source is reached; importer.Options embeds the
	// same struct, so an import hands it over whole.
	Access
	// Proxy picks the proxy of an HTTP request; nil reads HTTP_PROXY,
	// HTTPS_PROXY and NO_PROXY from the environment.
	Proxy func(*http.Request) (*url.URL, error)
	// Transport, when not nil, carries the requests of HTTP sources in
	// place of a transport built from CertDir, InsecureTLS and Proxy,
	// which it then applies itself (a custom dialer, instrumentation,
	// tests). It must not ask for compressed transfer: the bytes have to
	// arrive as stored. Container-image sources do not use it, since
	// containers/image builds its own.
	Transport http.RoundTripper
	// Retries bounds how many times a failed request or a broken transfer
	// is tried again over the life of the source (every Open together).
	// Connection errors, stalls and HTTP 5xx, 429 and 408 are retried;
	// refusals (401, 403, 404, 410, a rejected certificate, an unknown
	// image) are not. 0 means 10; < 0 disables retries.
	Retries int
	// ChunkSize is the byte count of each range request of a parallel
	// read (0: decided at Open, DefaultChunkSize on a far link and
	// NearChunkSize on a near one); the buffers hold at most Connections ×
	// ChunkSize bytes.
	ChunkSize int64
	// UserAgent is sent with HTTP requests; "" means "diskimport-engine".
	UserAgent string
	// Logger defaults to slog.Default().
	Logger *slog.Logger

	// TempDir receives an oci-archive's extracted content and a copy of
	// CertDir when it holds *.pem files. Default: the system temp dir.
	TempDir string
}

// Access is how a source is reached and read: credentials, headers and TLS
// trust, the egress policy, stalls, retry pacing and parallel connections,
// and a registry image's platform and configuration files.
type Access struct {
	// Username and Password authenticate to the source: HTTP basic auth
	// (sent only to the URL's own origin, also across redirects), or
	// registry credentials, which win over AuthFile. For HTTP, when both
	// are empty, user info in the URL (https://user:pw@host/...) is used.
	Username, Password string
	// Headers are extra HTTP request headers as "Name: value" lines (CDI's
	// IMPORTER_EXTRA_HEADER_n format). They are scoped like credentials and
	// applied before basic auth, so basic auth wins over an
	// "Authorization:" line.
	Headers []string
	// CertDir holds CA certificates (*.crt, *.pem) trusted on top of the
	// system pool; for registries also client certificates (*.cert with
	// *.key).
	CertDir string
	// InsecureTLS skips server certificate verification (and, for
	// registries, allows plain HTTP).
	InsecureTLS bool
	// Egress, when not nil, is the policy every connection of a network
	// source is checked against: the transports NewTransport builds dial
	// through it, and a registry pull's requests go through a relay that
	// does (containers/image takes no dialer). A caller's Transport must apply it itself (dial with
	// Egress.DialContext). Nil: no policy.
	Egress *EgressPolicy
	// MetadataCredentials lets the S3 and GCS sources take their
	// credentials from the cloud's instance metadata service (AWS IMDSv2,
	// the GKE or GCE metadata server) when no other source of credentials
	// is configured. Only the credential requests may then reach the
	// metadata address, past the Egress policy; the import's data and its
	// redirects never do. False (the default) never asks it.
	MetadataCredentials bool
	// StallTimeout fails a transfer when no byte arrives for this long
	// while the engine waits for one; <= 0 means 5 minutes.
	StallTimeout time.Duration
	// NoConnectRetry fails at once when the very first request of an HTTP
	// source cannot reach the server (connection refused, DNS, TLS
	// handshake): nothing has been received, so there is nothing to resume,
	// and a person at a terminal wants the cause in seconds. Retries still
	// cover a transfer that started and broke, and statuses the server
	// answered with. False (the default, and CDI's pods) retries those too.
	NoConnectRetry bool
	// RetryBackoff is the first delay before a retry; it doubles for each
	// failure in a row, up to 30 s, with jitter. 0 means 1 s.
	RetryBackoff time.Duration
	// RetryMaxElapsed bounds one streak of failures (from the first failure
	// until bytes flow again); no retry starts past it. 0 means 5 minutes.
	RetryMaxElapsed time.Duration
	// Connections is how many connections an HTTP, S3 or GCS object is
	// read over at once when its size is known and its server serves byte
	// ranges: 1 one GET as a plain stream; 0 lets the source decide from
	// the CPU the process may use and the link (one GET on a near link
	// with less than two CPUs, as in a pod under CDI's 750m limit, else
	// DefaultConnections; the rule is rangeConnections'). The
	// chunks arrive in order, each resumed on its own after a break, every
	// request to the object's origin with the credentials and pinned to the
	// object first seen. At most MaxConnections.
	Connections int
	// Arch picks the platform from a container-image index (default
	// runtime.GOARCH). When set explicitly, a single-platform image must
	// match it too.
	Arch string
	// AuthFile is a containers auth.json or docker config.json. "" lets
	// containers/image look in its default places (REGISTRY_AUTH_FILE,
	// $XDG_RUNTIME_DIR/containers/auth.json, ~/.docker/config.json).
	AuthFile string
	// RegistriesConf is the registries.conf to use (mirrors, blocked and
	// insecure registries); "" uses the system's. When set, its drop-in
	// directory is RegistriesConf+".d" and the signature-storage directory
	// (registries.d) is the one next to it, so nothing else of the host is
	// read.
	RegistriesConf string
}

func (c Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.Default()
	}
	return c.Logger
}

// parallel is Connections and ChunkSize, checked (0: decided at Open,
// rangeConnections and rangeChunkSize).
func (c Config) parallel() (int, int64, error) {
	conns, chunk := c.Connections, c.ChunkSize
	if conns < 0 || conns > MaxConnections {
		return 0, 0, fmt.Errorf("connections %d: want 1 to %d, or 0 for the default: %w", c.Connections, MaxConnections, errdefs.ErrInvalidOptions)
	}
	if chunk != 0 && (chunk < 64<<10 || chunk > 256<<20) {
		return 0, 0, fmt.Errorf("chunk size %d: want 64 KiB to 256 MiB: %w", c.ChunkSize, errdefs.ErrInvalidOptions)
	}
	return conns, chunk, nil
}

// retryPolicy is the Config's retry fields as the retry package reads
// them; retryable, when not nil, classifies failures.
func (c Config) retryPolicy(retryable func(error) bool) retry.Policy {
	return retry.Policy{
		MaxRetries: c.Retries,
		FirstDelay: c.RetryBackoff,
		MaxElapsed: c.RetryMaxElapsed,
		Retryable:  retryable,
	}
}

package datasource

import (
	"crypto/tls"
	"net/http"

	"github.com/diskimport/engine/internal/netconn"
)

// sourceReadBuffer is how much a source's connection reads per system
// call: crypto/tls reads about one 16 KiB record per call, and an HTTPS
// download's TLS reads its records through this buffer instead
// (netconn.BufferedDialer; a plain body read in larger pieces bypasses
// it).
const sourceReadBuffer = 64 << 10

// NewTransport is the one transport every network source but the
// container-image ones is carried by (HTTP, S3, GCS and their token
// endpoints): c's CA pool and TLS settings, its proxy (the environment's
// when nil), every connection dialled (with c.Egress through the policy)
// and read through a buffer (sourceReadBuffer). The bytes must
// arrive as stored (checksums cover them, and the
// engine peels compression itself), so it never asks for gzip transfer.
// Callers set the keep-alive behaviour their reads want.
func NewTransport(c Config) (*http.Transport, error) {
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.InsecureTLS} //nolint:gosec // only when the caller asks
	if c.CertDir != "" {
		pool, err := certPool(c.CertDir, c.logger())
		if err != nil {
			return nil, err
		}
		tlsConf.RootCAs = pool
	}
	ua := c.UserAgent
	if ua == "" {
		ua = defaultUserAgent
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = c.Proxy
	if tr.Proxy == nil {
		tr.Proxy = http.ProxyFromEnvironment
	}
	dial := tr.DialContext
	if c.Egress != nil {
		dial = c.Egress.DialContext
		tr.Proxy = c.Egress.proxy(tr.Proxy)
	}
	tr.DialContext = netconn.BufferedDialer(dial, sourceReadBuffer)
	tr.TLSClientConfig = tlsConf
	tr.ProxyConnectHeader = http.Header{"User-Agent": {ua}}
	tr.DisableCompression = true
	return tr, nil
}

// oneRequestPerConnection makes tr carry every request in flight on a TCP
// connection of its own (HTTP/1.1): range reads run in parallel (qemu-img's
// through the NBD export, a parallel stream's chunks), and over HTTP/2 Go
// would multiplex them onto one connection, whose window and the path's
// losses would then bound all of them together, the very limit several
// connections are for. tr must not have carried a request yet, or be a
// Clone (whose TLS configuration may already offer h2: it is reset).
func oneRequestPerConnection(tr *http.Transport) {
	tr.ForceAttemptHTTP2 = false
	tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	if tr.TLSClientConfig != nil {
		tr.TLSClientConfig.NextProtos = nil
	}
}

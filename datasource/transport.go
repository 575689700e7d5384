package datasource

import (
	"crypto/tls"
	"net/http"
)

// NewTransport is the one transport every network source but the
// container-image ones is carried by (HTTP, S3, GCS and their token
// endpoints): c's CA pool and TLS settings, its proxy (the environment's
// when nil), and with c.Egress every connection dialled through the
// policy. The bytes must arrive as stored (checksums cover them, and the
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
	if c.Egress != nil {
		tr.DialContext = c.Egress.DialContext
		tr.Proxy = c.Egress.proxy(tr.Proxy)
	}
	tr.TLSClientConfig = tlsConf
	tr.ProxyConnectHeader = http.Header{"User-Agent": {ua}}
	tr.DisableCompression = true
	return tr, nil
}

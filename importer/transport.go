package importer

import (
	"net/http"
)

// retryLimit maps Options.Retries to datasource.Config.Retries, where 0
// means the default and a negative value none.
func retryLimit(n *int) int {
	switch {
	case n == nil:
		return 0
	case *n <= 0:
		return -1
	}
	return *n
}

// transport is the caller's Transport, or one built around the caller's
// TLSConfig, or nil: the source then builds its own from CertDir,
// InsecureTLS and the proxy environment.
func transport(o Options) http.RoundTripper {
	if o.Transport != nil {
		return o.Transport
	}
	if o.TLSConfig == nil {
		return nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = o.TLSConfig.Clone()
	// The bytes must arrive as stored: a transparently gunzipped body
	// would defeat checksums, ranges and format detection.
	tr.DisableCompression = true
	return tr
}

package datasource

import "net/http"

// objectStoreTransport is the transport an object-store source (S3, GCS)
// wraps with its signing or token layer: the caller's Transport, or the
// HTTP source's own (CA, proxy, TLS settings of c) with a few idle
// connections kept, since range reads use it as it is.
func objectStoreTransport(c Config) (http.RoundTripper, error) {
	if c.Transport != nil {
		return c.Transport, nil
	}
	hs := &httpSource{ua: c.UserAgent, log: c.logger()}
	if hs.ua == "" {
		hs.ua = defaultUserAgent
	}
	tr, err := hs.transport(c)
	if err != nil {
		return nil, err
	}
	tr.DisableKeepAlives = false
	tr.MaxIdleConnsPerHost = rangeIdleConns
	tr.MaxIdleConns = rangeIdleConns
	return tr, nil
}

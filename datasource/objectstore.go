package datasource

import "net/http"

// objectStoreTransport is the transport an object-store source (S3, GCS)
// wraps with its signing or token layer: the caller's Transport, or the
// one NewTransport builds (CA, proxy, TLS, egress settings of c) with a few idle
// connections kept and one request per connection, since range reads use
// it as it is.
func objectStoreTransport(c Config) (http.RoundTripper, error) {
	if c.Transport != nil {
		return c.Transport, nil
	}
	tr, err := NewTransport(c)
	if err != nil {
		return nil, err
	}
	tr.MaxIdleConnsPerHost = rangeIdleConns
	tr.MaxIdleConns = rangeIdleConns
	oneRequestPerConnection(tr)
	return tr, nil
}

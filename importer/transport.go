package importer

import (
	"net/http"

	"github.com/diskimport/engine/datasource"
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

// transport is the caller's Transport, or one datasource.NewTransport
// builds around the caller's TLSConfig (proxy and egress policy of c
// included), or nil: the source then builds its own from c.
func transport(o Options, c datasource.Config) (http.RoundTripper, error) {
	if o.Transport != nil {
		return o.Transport, nil
	}
	if o.TLSConfig == nil {
		return nil, nil
	}
	c.CertDir = "" // TLSConfig's RootCAs replace it
	tr, err := datasource.NewTransport(c)
	if err != nil {
		return nil, err
	}
	tr.TLSClientConfig = o.TLSConfig.Clone()
	return tr, nil
}

package uploadserver

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"slices"

	"github.com/diskimport/engine/errdefs"
)

// checkClientCert enforces ClientName/RequireClientCert: a TLS request
// whose certificate chain the server verified, and whose leaf is named
// ClientName. The TLS layer only asks for a certificate (so probes of
// /healthz without one still work); this is where an upload is refused.
func (h *Handler) checkClientCert(r *http.Request) error {
	if h.opts.ClientName == "" && !h.opts.RequireClientCert {
		return nil
	}
	if r.TLS == nil {
		return fmt.Errorf("a client certificate is required and the request is not over TLS: %w", errdefs.ErrClientNotAuthorized)
	}
	if len(r.TLS.VerifiedChains) == 0 || len(r.TLS.PeerCertificates) == 0 {
		return fmt.Errorf("no client certificate signed by the client CA was presented: %w", errdefs.ErrClientNotAuthorized)
	}
	if h.opts.ClientName == "" {
		return nil
	}
	leaf := r.TLS.PeerCertificates[0]
	if leaf.Subject.CommonName == h.opts.ClientName || slices.Contains(leaf.DNSNames, h.opts.ClientName) {
		return nil
	}
	return fmt.Errorf("client certificate %q is not %q: %w", leaf.Subject.CommonName, h.opts.ClientName, errdefs.ErrClientNotAuthorized)
}

// clientCAPool reads the PEM certificates of the client CA file.
func clientCAPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("client CA: %w: %w", err, errdefs.ErrInvalidOptions)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("client CA %s holds no PEM certificate: %w", file, errdefs.ErrInvalidOptions)
	}
	return pool, nil
}

// serverTLSConfig is the server's TLS configuration: the certificate from
// files (or the one given), and with a client CA, a request for a client
// certificate verified against it.
func (s *Server) serverTLSConfig() (*tls.Config, error) {
	conf := s.TLSConfig
	if conf == nil && s.TLSCert == "" {
		if s.ClientCAFile != "" {
			return nil, fmt.Errorf("a client CA needs TLS: give the server a certificate: %w", errdefs.ErrInvalidOptions)
		}
		return nil, nil
	}
	if conf == nil {
		pair, err := tls.LoadX509KeyPair(s.TLSCert, s.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("server certificate: %w: %w", err, errdefs.ErrInvalidOptions)
		}
		conf = &tls.Config{Certificates: []tls.Certificate{pair}}
	} else {
		conf = conf.Clone()
	}
	if s.MinVersion != 0 {
		conf.MinVersion = s.MinVersion
	}
	if conf.MinVersion == 0 {
		conf.MinVersion = tls.VersionTLS12
	}
	if len(s.CipherSuites) > 0 {
		conf.CipherSuites = s.CipherSuites
	}
	if s.ClientCAFile != "" {
		pool, err := clientCAPool(s.ClientCAFile)
		if err != nil {
			return nil, err
		}
		conf.ClientCAs = pool
		conf.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return conf, nil
}

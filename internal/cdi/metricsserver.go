package cdi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"time"
)

// MetricsServer serves the metrics over HTTPS, as CDI's importer does on
// :8443 (every path answers, as there).
type MetricsServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// StartMetricsServer listens at c.Listen and serves h with c's certificate,
// or one made now and signed by itself: CDI's controller scrapes the pod
// without verifying it. The caller stops it with Stop.
func StartMetricsServer(c MetricsConfig, h http.Handler) (*MetricsServer, error) {
	cert := c.Certificate
	if cert == nil {
		self, err := selfSignedCertificate()
		if err != nil {
			return nil, fmt.Errorf("making the metrics server's certificate: %w", err)
		}
		cert = &self
	}
	tlsConf := &tls.Config{
		Certificates: []tls.Certificate{*cert},
		MinVersion:   c.MinVersion,
		CipherSuites: c.CipherSuites,
	}
	if tlsConf.MinVersion == 0 {
		tlsConf.MinVersion = tls.VersionTLS12
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return nil, fmt.Errorf("metrics server: %w", err)
	}
	s := &MetricsServer{ln: ln, done: make(chan error, 1)}
	s.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConf}
	go func() { s.done <- s.srv.ServeTLS(ln, "", "") }()
	return s, nil
}

// Addr is the address the server listens at (the port chosen for ":0").
func (s *MetricsServer) Addr() string { return s.ln.Addr().String() }

// Stop closes the server, letting a scrape in flight finish for a moment.
func (s *MetricsServer) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if serveErr := <-s.done; !errors.Is(serveErr, http.ErrServerClosed) && err == nil {
		err = serveErr
	}
	return err
}

// selfSignedCertificate makes an ECDSA P-256 certificate valid for a year.
func selfSignedCertificate() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "importer-metrics"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

package uploadserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/netconn"
)

// DefaultAddr is where CDI's upload server listens.
const DefaultAddr = ":8443"

// shutdownGrace is how long a stopping server waits for responses in flight.
const shutdownGrace = 10 * time.Second

// Server runs a Handler on a listener until one import succeeds (unless
// KeepRunning) or its context ends.
type Server struct {
	Options
	// Addr to listen on; default DefaultAddr. Ignored when Listener is set.
	Addr     string
	Listener net.Listener
	// TLSCert and TLSKey are PEM files; or TLSConfig carries certificates.
	// With neither, the server speaks plain HTTP.
	TLSCert, TLSKey string
	TLSConfig       *tls.Config
	// ClientCAFile is the CA (PEM) a client certificate must chain to;
	// with it the server asks for one and every upload path needs it (see
	// Options.ClientName). It needs TLS.
	ClientCAFile string
	// MinVersion and CipherSuites override the TLS defaults (TLS 1.2 at
	// least, Go's suites).
	MinVersion   uint16
	CipherSuites []uint16
	// Deadline, when set, ends the server once it passes with no upload
	// complete (one in progress is waited for): Run then returns an error
	// wrapping errdefs.ErrDeadlinePassed.
	Deadline time.Time
	// ListenAnywhere allows listening beyond the loopback interface with no
	// protection at all (no TLS, no token, no client CA); without it such
	// a server is moved to 127.0.0.1 with a warning.
	ListenAnywhere bool

	cloned bool
}

// Cloned reports, after Run, whether the import was a clone.
func (s *Server) Cloned() bool { return s.cloned }

// deadlinePoll is how often a passed deadline checks whether the upload in
// progress has finished.
const deadlinePoll = 100 * time.Millisecond

// Run serves until an import succeeds (then it returns that import's
// result) or ctx ends (then it returns the last attempt's result, if any,
// and an error wrapping errdefs.ErrCancelled). With KeepRunning it only
// returns when ctx ends; the last successful result is returned, with no
// error.
func (s *Server) Run(ctx context.Context) (*importer.Result, error) {
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	if (s.TLSCert == "") != (s.TLSKey == "") {
		return nil, fmt.Errorf("TLS needs both a certificate and a key file: %w", errdefs.ErrInvalidOptions)
	}
	tlsConf, err := s.serverTLSConfig()
	if err != nil {
		return nil, err
	}
	ln := s.Listener
	if ln == nil {
		addr := s.Addr
		if addr == "" {
			addr = DefaultAddr
		}
		if tlsConf == nil && s.Token == "" && !s.ListenAnywhere {
			addr = loopbackOnly(addr, log)
		}
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("upload server: listening on %s: %w", addr, err)
		}
	}
	serveCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	o := s.Options
	o.BaseContext = serveCtx
	if s.ClientCAFile != "" {
		o.RequireClientCert = true
	}
	h := NewHandler(o)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second, TLSConfig: tlsConf,
		BaseContext: func(net.Listener) context.Context { return serveCtx }}
	log.Info("Upload server listening", "addr", ln.Addr().String(), "tls", tlsConf != nil,
		"clientCA", s.ClientCAFile != "", "clientName", s.ClientName, "token", s.Token != "", "target", s.Import.Target)
	serveErr := make(chan error, 1)
	go func() {
		if tlsConf != nil {
			serveErr <- srv.ServeTLS(netconn.BufferedReads(ln), "", "")
		} else {
			serveErr <- srv.Serve(ln)
		}
	}()
	var deadline <-chan time.Time
	if !s.Deadline.IsZero() {
		timer := time.NewTimer(time.Until(s.Deadline))
		defer timer.Stop()
		deadline = timer.C
	}
	var runErr error
	deadlinePassed := false
	select {
	case <-h.Done():
		log.Info("Import complete; upload server stopping")
	case <-ctx.Done():
		log.Info("Upload server stopping", "cause", ctx.Err())
	case err := <-serveErr:
		runErr = fmt.Errorf("upload server: %w", err)
	case <-deadline:
		log.Info("Deadline passed; the upload server takes no new upload", "deadline", s.Deadline)
		deadlinePassed = true
		h.closeAtDeadline(ctx)
	}
	// Let the final response reach the client, then stop imports still
	// running (only possible when ctx ended).
	shutCtx, shutCancel := context.WithTimeout(context.Background(), shutdownGrace)
	if err := srv.Shutdown(shutCtx); err != nil {
		cancel()
		srv.Close()
	}
	shutCancel()
	cancel()
	h.abandonClone()
	h.Wait()
	s.cloned = h.LastWasClone()
	if runErr != nil && !errors.Is(runErr, http.ErrServerClosed) {
		return nil, runErr
	}
	res, err, ok := h.Last()
	if ok && (!s.KeepRunning || ctx.Err() != nil || deadlinePassed) {
		return res, nil
	}
	if deadlinePassed {
		if res == nil {
			res = &importer.Result{Target: s.Import.Target}
		}
		return res, fmt.Errorf("upload server: deadline %s: %w", s.Deadline.Format(time.RFC3339), errdefs.ErrDeadlinePassed)
	}
	if res == nil {
		res = &importer.Result{Target: s.Import.Target}
	}
	if err == nil {
		err = errors.New("no upload was received")
	}
	return res, fmt.Errorf("upload server stopped before an import completed: %w: last attempt: %w", errdefs.ErrCancelled, err)
}

// loopbackOnly keeps an unprotected server (no TLS, token or client CA) on
// 127.0.0.1: anyone who can reach it could write the target.
func loopbackOnly(addr string, log *slog.Logger) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr // net.Listen reports it
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() || host == "localhost" {
		return addr
	}
	safe := net.JoinHostPort("127.0.0.1", port)
	log.Warn("No TLS, token or client CA: the upload server listens on 127.0.0.1 only (give one of them, or allow it explicitly, to listen beyond)",
		"asked", addr, "listening", safe)
	return safe
}

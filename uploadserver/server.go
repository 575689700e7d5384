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
}

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
	ln := s.Listener
	if ln == nil {
		addr := s.Addr
		if addr == "" {
			addr = DefaultAddr
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
	h := NewHandler(o)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second, TLSConfig: s.TLSConfig,
		BaseContext: func(net.Listener) context.Context { return serveCtx }}
	tlsOn := s.TLSCert != "" || s.TLSConfig != nil
	log.Info("Upload server listening", "addr", ln.Addr().String(), "tls", tlsOn, "target", s.Import.Target)
	serveErr := make(chan error, 1)
	go func() {
		var err error
		if tlsOn {
			err = srv.ServeTLS(ln, s.TLSCert, s.TLSKey)
		} else {
			err = srv.Serve(ln)
		}
		serveErr <- err
	}()
	var runErr error
	select {
	case <-h.Done():
		log.Info("Import complete; upload server stopping")
	case <-ctx.Done():
		log.Info("Upload server stopping", "cause", ctx.Err())
	case err := <-serveErr:
		runErr = fmt.Errorf("upload server: %w", err)
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
	h.Wait()
	if runErr != nil && !errors.Is(runErr, http.ErrServerClosed) {
		return nil, runErr
	}
	res, err, ok := h.Last()
	if ok && (!s.KeepRunning || ctx.Err() != nil) {
		return res, nil
	}
	if res == nil {
		res = &importer.Result{Target: s.Import.Target}
	}
	if err == nil {
		err = errors.New("no upload was received")
	}
	return res, fmt.Errorf("upload server stopped before an import completed: %w: last attempt: %w", errdefs.ErrCancelled, err)
}

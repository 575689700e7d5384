package nbdserver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"
)

// UnixExport runs one Server for a local client (qemu-img) on a Unix
// socket in a private directory (mode 0700, as os.MkdirTemp makes it), so
// no other user can connect to the export.
type UnixExport struct {
	what   string // for logs and error messages: "reading the image over HTTP", "writing the target"
	dir    string
	sock   string
	server *Server
	cancel context.CancelFunc
	done   chan error
}

// ServeUnix makes the socket directory (pattern as for os.MkdirTemp),
// listens on name in it, builds the server with a context that Stop
// cancels, and serves it. what names the export in logs and errors.
func ServeUnix(ctx context.Context, pattern, name, what string, newServer func(ctx context.Context) (*Server, error)) (*UnixExport, error) {
	parent := ""
	if len(os.TempDir()) > 60 {
		// A Unix socket path must fit in 108 bytes.
		parent = "/tmp"
	}
	dir, err := os.MkdirTemp(parent, pattern)
	if err != nil {
		return nil, fmt.Errorf("creating the NBD socket directory: %w", err)
	}
	e := &UnixExport{what: what, dir: dir, sock: filepath.Join(dir, name), done: make(chan error, 1)}
	ln, err := net.Listen("unix", e.sock)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("listening on %s: %w", e.sock, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	if e.server, err = newServer(sctx); err != nil {
		cancel()
		ln.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	e.cancel = cancel
	go func() { e.done <- e.server.Serve(sctx, ln) }()
	return e, nil
}

// SocketPath is the export's socket.
func (e *UnixExport) SocketPath() string { return e.sock }

// QemuNode is the qemu-img protocol node of the export, for a json:
// filename.
func (e *UnixExport) QemuNode() map[string]any {
	return map[string]any{"driver": "nbd", "server": map[string]any{"type": "unix", "path": e.sock}}
}

// Err is the server's first export I/O error.
func (e *UnixExport) Err() error { return e.server.Err() }

// Cause prefers the export's own I/O error (what actually went wrong on our
// side: the HTTP read, ENOSPC, a device error, a cancel) over the client's
// bare errno message. Safe on nil.
func (e *UnixExport) Cause(err error) error {
	if e == nil || err == nil {
		return err
	}
	if serr := e.server.Err(); serr != nil {
		return fmt.Errorf("%w (%s failed: %w)", err, e.what, serr)
	}
	return err
}

// Stop ends the server, runs abort (to end reads in flight; may be nil),
// waits for the server (at most 30 s) and removes the socket directory.
// Safe to call more than once and on nil.
func (e *UnixExport) Stop(log *slog.Logger, abort func()) {
	if e == nil || e.cancel == nil {
		return
	}
	e.cancel()
	if abort != nil {
		abort()
	}
	select {
	case err := <-e.done:
		if err != nil {
			log.Warn("NBD export ended with an error", "export", e.what, "err", err)
		}
	case <-time.After(30 * time.Second):
		log.Warn("NBD export did not stop in time", "export", e.what)
	}
	os.RemoveAll(e.dir)
	e.cancel = nil
}

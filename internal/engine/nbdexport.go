package engine

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/diskimport/engine/internal/nbdserver"
)

// unixExport runs one NBD server for qemu-img on a Unix socket in a private
// directory (mode 0700): the plumbing the ranged export (ranged.go) and the
// target export (targetexport.go) share.
type unixExport struct {
	what   string // for logs and error messages: "reading the image over HTTP", "writing the target"
	dir    string
	sock   string
	server *nbdserver.Server
	cancel context.CancelFunc
	done   chan error
}

// serveUnix makes the socket directory (pattern as for os.MkdirTemp),
// listens on name in it, builds the server with a context that stop
// cancels, and serves it.
func serveUnix(ctx context.Context, pattern, name, what string, newServer func(ctx context.Context) (*nbdserver.Server, error)) (*unixExport, error) {
	parent := ""
	if len(os.TempDir()) > 60 {
		// A Unix socket path must fit in 108 bytes.
		parent = "/tmp"
	}
	dir, err := os.MkdirTemp(parent, pattern)
	if err != nil {
		return nil, fmt.Errorf("creating the NBD socket directory: %w", err)
	}
	e := &unixExport{what: what, dir: dir, sock: filepath.Join(dir, name), done: make(chan error, 1)}
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

// nbdFile is the qemu-img protocol node of the export.
func (e *unixExport) nbdFile() map[string]any {
	return map[string]any{"driver": "nbd", "server": map[string]any{"type": "unix", "path": e.sock}}
}

// cause prefers the export's own I/O error (what actually went wrong on our
// side: the HTTP read, ENOSPC, a device error, a cancel) over qemu-img's
// bare errno message.
func (e *unixExport) cause(err error) error {
	if e == nil || err == nil {
		return err
	}
	if serr := e.server.Err(); serr != nil {
		return fmt.Errorf("%w (%s failed: %w)", err, e.what, serr)
	}
	return err
}

// stop ends the server, runs abort (to end reads in flight), waits for
// the server and removes the socket directory. Safe to call more than once.
func (e *unixExport) stop(log *slog.Logger, abort func()) {
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

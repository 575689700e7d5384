package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/diskimport/engine/internal/nbdserver"
	"github.com/diskimport/engine/internal/volume"
)

// targetExport serves a block target to qemu-img as a writable NBD export
// on a Unix socket in a private directory, so qemu-img never opens the
// device itself: every write goes through a volume.DeviceWriter, which
// keeps the image's first MiB in our memory until the conversion
// succeeded and the rest is on disk. Killing qemu-img, or us (qemu-img
// then dies by Pdeathsig), at any moment leaves no bootable-looking device.
type targetExport struct {
	dir    string
	sock   string
	writer *volume.DeviceWriter
	server *nbdserver.Server
	cancel context.CancelFunc
	done   chan error
}

// exportMaxRequest bounds one request: qemu-img convert writes 2 MiB at a
// time, and this keeps the payload buffers of all requests in flight
// (nbdserver.DefaultMaxInFlight of them) at 64 MiB even for a client that
// sends the most it may.
const exportMaxRequest = 4 << 20

// startTargetExport opens a DeviceWriter on tgt and starts serving it.
// With preallocate, zeros qemu-img writes as data keep their blocks
// allocated.
func startTargetExport(ctx context.Context, tgt *volume.Target, preallocate bool, log *slog.Logger) (*targetExport, error) {
	w, err := tgt.NewDeviceWriter(ctx, volume.DeviceWriterOptions{KeepAllocated: preallocate})
	if err != nil {
		return nil, err
	}
	srv, err := nbdserver.NewWritable(w, w.Size(), log)
	if err != nil {
		return nil, err
	}
	// Requests aligned to the device's blocks take the direct path; qemu
	// aligns them when told the minimum.
	srv.MinBlock = uint32(w.BlockSize())
	srv.MaxRequest = exportMaxRequest
	parent := ""
	if len(os.TempDir()) > 60 {
		// A Unix socket path must fit in 108 bytes.
		parent = "/tmp"
	}
	dir, err := os.MkdirTemp(parent, "importer-target-*") // mode 0700
	if err != nil {
		return nil, fmt.Errorf("creating the NBD socket directory: %w", err)
	}
	e := &targetExport{dir: dir, sock: filepath.Join(dir, "target.sock"), writer: w, server: srv, done: make(chan error, 1)}
	ln, err := net.Listen("unix", e.sock)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("listening on %s: %w", e.sock, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	e.cancel = cancel
	go func() { e.done <- srv.Serve(sctx, ln) }()
	return e, nil
}

// spec is the qemu-img destination: raw data on the NBD export.
func (e *targetExport) spec() string {
	file := map[string]any{"driver": "nbd", "server": map[string]any{"type": "unix", "path": e.sock}}
	b, _ := json.Marshal(map[string]any{"driver": "raw", "file": file})
	return "json:" + string(b)
}

// cause prefers the export's own write error (ENOSPC, an I/O error of the
// device, a cancel) over qemu-img's bare errno message.
func (e *targetExport) cause(err error) error {
	if e == nil || err == nil {
		return err
	}
	if werr := e.server.Err(); werr != nil {
		return fmt.Errorf("%w (writing the target failed: %w)", err, werr)
	}
	return err
}

// stop ends the server, waits for requests in flight and removes the
// socket directory. Safe to call more than once and on nil.
func (e *targetExport) stop(log *slog.Logger) {
	if e == nil || e.cancel == nil {
		return
	}
	e.cancel()
	select {
	case err := <-e.done:
		if err != nil {
			log.Warn("NBD target export ended with an error", "err", err)
		}
	case <-time.After(30 * time.Second):
		log.Warn("NBD target export did not stop in time")
	}
	os.RemoveAll(e.dir)
	e.cancel = nil
}

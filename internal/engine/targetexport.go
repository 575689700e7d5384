package engine

import (
	"context"
	"encoding/json"
	"log/slog"

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
	unix   *nbdserver.UnixExport
	writer *volume.DeviceWriter
	hash   *nbdserver.HashingExport // the content digest of what qemu-img writes
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
	hashed := nbdserver.NewHashingExport(w)
	srv, err := nbdserver.NewWritable(hashed, w.Size(), log)
	if err != nil {
		return nil, err
	}
	// Requests aligned to the device's blocks take the direct path; qemu
	// aligns them when told the minimum.
	srv.MinBlock = uint32(w.BlockSize())
	srv.MaxRequest = exportMaxRequest
	u, err := nbdserver.ServeUnix(ctx, "importer-target-*", "target.sock", "writing the target", func(context.Context) (*nbdserver.Server, error) {
		return srv, nil
	})
	if err != nil {
		return nil, err
	}
	return &targetExport{unix: u, writer: w, hash: hashed}, nil
}

// spec is the qemu-img destination: raw data on the NBD export.
func (e *targetExport) spec() string {
	b, _ := json.Marshal(map[string]any{"driver": "raw", "file": e.unix.QemuNode()})
	return "json:" + string(b)
}

// cause prefers the export's own write error (ENOSPC, an I/O error of the
// device, a cancel) over qemu-img's bare errno message. Safe on nil.
func (e *targetExport) cause(err error) error {
	if e == nil {
		return err
	}
	return e.unix.Cause(err)
}

// stop ends the server, waits for requests in flight and removes the
// socket directory. Safe to call more than once and on nil.
func (e *targetExport) stop(log *slog.Logger) {
	if e == nil {
		return
	}
	e.unix.Stop(log, nil)
}

package nbdserver

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/volume"
)

// DeviceExport serves a block target to qemu-img as a writable NBD export
// on a Unix socket in a private directory, so qemu-img never opens the
// device itself: every write goes through a volume.DeviceWriter, which
// keeps the image's first MiB in our memory until the conversion
// succeeded and the rest is on disk. Killing qemu-img, or us (qemu-img
// then dies by Pdeathsig), at any moment leaves no bootable-looking device.
type DeviceExport struct {
	unix *UnixExport
	hash *HashingExport // the content digest of what qemu-img writes
}

// deviceMaxRequest bounds one request: qemu-img convert writes 2 MiB at a
// time, and this keeps the payload buffers of all requests in flight
// (DefaultMaxInFlight of them) at 64 MiB even for a client that sends the
// most it may.
const deviceMaxRequest = 4 << 20

// ServeDevice serves w. Its caller keeps w: once Stop returned and Err is
// nil, w.Finish writes the held-back head.
func ServeDevice(ctx context.Context, w *volume.DeviceWriter, log *slog.Logger) (*DeviceExport, error) {
	hashed := NewHashingExport(w)
	srv, err := NewWritable(hashed, w.Size(), log)
	if err != nil {
		return nil, err
	}
	// Requests aligned to the device's blocks take the direct path; qemu
	// aligns them when told the minimum.
	srv.MinBlock = uint32(w.BlockSize())
	srv.MaxRequest = deviceMaxRequest
	u, err := ServeUnix(ctx, "importer-target-*", "target.sock", "writing the target", func(context.Context) (*Server, error) {
		return srv, nil
	})
	if err != nil {
		return nil, err
	}
	return &DeviceExport{unix: u, hash: hashed}, nil
}

// QemuSpec is the qemu-img destination: raw data on the NBD export.
func (e *DeviceExport) QemuSpec() string {
	b, _ := json.Marshal(map[string]any{"driver": "raw", "file": e.unix.QemuNode()})
	return "json:" + string(b)
}

// Cause prefers the export's own write error (ENOSPC, an I/O error of the
// device, a cancel) over qemu-img's bare errno message. Safe on nil.
func (e *DeviceExport) Cause(err error) error {
	if e == nil {
		return err
	}
	return e.unix.Cause(err)
}

// Err is the export's first write error, even one qemu-img did not
// report.
func (e *DeviceExport) Err() error { return e.unix.Err() }

// Sum is the content digest of the first size bytes qemu-img wrote (see
// HashingExport.Sum).
func (e *DeviceExport) Sum(size int64) (blkhash.Digest, error) { return e.hash.Sum(size) }

// Stop ends the server, waits for requests in flight and removes the
// socket directory. Safe to call more than once and on nil.
func (e *DeviceExport) Stop(log *slog.Logger) {
	if e == nil {
		return
	}
	e.unix.Stop(log, nil)
}

package importer

import (
	"context"
	"log/slog"
	"os"

	"github.com/diskimport/engine/qemu"
)

// BlankOptions describe an empty disk (CDI's blank data volume).
type BlankOptions struct {
	// Target is a block device, a file, or an existing directory
	// (DIR/disk.img).
	Target string
	// Size is the volume size in bytes; required for file targets. A file
	// gets Size less FilesystemOverhead (rounded down to 1 MiB). For a block
	// device it is optional and must not exceed the device.
	Size               int64
	FilesystemOverhead float64
	// Format of a file target: "raw" (default, a sparse file) or "qcow2".
	Format string
	// Preallocation allocates the whole file, or zeroes the whole block
	// device (which otherwise keeps whatever it held).
	Preallocation bool
	// Mode is the permission bits of a new file target (0: 0660, as an
	// import's TargetOptions.Mode).
	Mode   os.FileMode
	Logger *slog.Logger
	// Qemu runs qemu-img create for qcow2; zero value: from PATH.
	Qemu *qemu.Runner
}

// CreateBlank makes an empty disk on o.Target. A file target is written
// under a temporary name, fsynced and renamed into place like an import; a
// block device is left as it is, or zeroed with Preallocation (BLKZEROOUT
// where the device supports it, written zeros otherwise). It runs the
// phases Info, Resize (the disk at its size), Commit and Complete.
func CreateBlank(ctx context.Context, o BlankOptions) (*Result, error) {
	o.Logger = orDiscard(o.Logger)
	res, err := importWithRestarts(ctx, request{
		Target: o.Target,
		Blank:  true,
		TargetOptions: TargetOptions{
			Size:               o.Size,
			FilesystemOverhead: o.FilesystemOverhead,
			Format:             o.Format,
			Preallocation:      o.Preallocation,
			Mode:               o.Mode,
		},
		Logger: o.Logger,
		Qemu:   o.Qemu,
	})
	return res, err
}

package engine

import (
	"log/slog"
	"os"

	"github.com/diskimport/engine/format"
	"github.com/diskimport/engine/internal/nbdserver"
)

// imageInput is what qemu-img reads on a converting route, handed from
// phase to phase: the local image in place (set by Info), the scratch copy
// TransferScratch made, or the NBD export of an HTTP object that Validate
// starts. It owns the scratch file and the export from the moment they are
// handed to it, and release frees both.
type imageInput struct {
	path    string // a local path, or a qemu-img json: spec of the export
	format  format.Format
	scratch string                 // the scratch file, "" once removed
	export  *nbdserver.ImageExport // nil unless serving
}

// removeScratch deletes the scratch copy once nothing reads it any more.
func (in *imageInput) removeScratch(log *slog.Logger) {
	if in.scratch == "" {
		return
	}
	if err := os.Remove(in.scratch); err != nil && !os.IsNotExist(err) {
		log.Warn("Removing scratch file failed", "path", in.scratch, "err", err)
	}
	in.scratch = ""
}

// stopExport ends the NBD export of the HTTP object. Safe to repeat.
func (in *imageInput) stopExport(log *slog.Logger) { in.export.Stop(log) }

func (in *imageInput) release(log *slog.Logger) {
	in.stopExport(log)
	in.removeScratch(log)
}

//go:build linux

package volume

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/diskimport/engine/errdefs"
)

// OpenScratch creates a new scratch file in dir for an image of format
// ext and opens it as a Scratch target, whose Path is the new file (the
// caller removes it once read, or after a failure). A directory that
// cannot take it fails with errdefs.ErrScratchSpaceRequired.
func OpenScratch(ctx context.Context, dir, ext string, log *slog.Logger) (*Target, error) {
	f, err := os.CreateTemp(dir, "importer-scratch-*."+ext)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrScratchSpaceRequired, err)
	}
	path := f.Name()
	f.Close()
	t, err := Open(ctx, Options{Path: path, Scratch: true, Logger: log})
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("%w: %v", errdefs.ErrScratchSpaceRequired, err)
	}
	return t, nil
}

// QemuCacheMode is qemu-img's cache mode for writing t: the one asked
// ("none" or "writeback"), else, for "" and "trynone", O_DIRECT ("none")
// wherever the target takes it and "writeback" where its filesystem
// refuses it (tmpfs before Linux 6.6). Through the page cache qemu-img left ~680 MiB dirty
// importing a 1 GiB image into a file, which a 600 MB pod cannot afford.
func (t *Target) QemuCacheMode(asked string) string {
	switch asked {
	case "none", "writeback":
		return asked
	}
	if t.kind == Block || SupportsDirectIO(t.writePath) {
		return "none"
	}
	return "writeback"
}

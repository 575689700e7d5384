package importer

import (
	"context"
	"fmt"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blockdev"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/volume"
)

// Clone is an import whose source is a local block device or image file.
// The copy itself is the core's (raw goes through the sparse volume.Writer,
// other formats through qemu-img); this file adds what a volume copy needs
// on top: an exact-size rule for storage migrations, a whole-device zeroing
// so zero blocks can be skipped, a refusal to copy a volume onto itself, and
// a read-back verification of both sides (verification).

// refuseSameVolume refuses a local source whose bytes the target holds too
// (volume.RefuseSameVolume: one device, a loop device over the source, a
// partition of it, ...). openSource calls it once the source is open and
// before its header is read, so no other complaint hides it. Onto a file
// only a device source is judged: a file copied onto its own name is
// staged beside it and renamed over it, which overwrites nothing it reads,
// but a loop device over the target would go on holding the replaced file.
func (a *attempt) refuseSameVolume() error {
	if a.caps.LocalPath == "" || a.target == nil {
		return nil
	}
	if a.target.Kind() != volume.Block && !isBlockDevice(a.caps.LocalPath) {
		return nil
	}
	return volume.RefuseSameVolume(a.caps.LocalPath, a.target.Path())
}

func isBlockDevice(path string) bool {
	ok, err := blockdev.IsBlockDevice(path)
	return err == nil && ok
}

// checkClone runs in Info once the source is identified and before any byte
// reaches the target.
func (a *attempt) checkClone(ctx context.Context, img *format.Image, st *datasource.Transfer) error {
	if a.req.Verify && a.caps.LocalPath == "" {
		return fmt.Errorf("verify needs a source that can be read a second time (a local file or block device), and %s is a stream: %w", a.req.Source, errdefs.ErrInvalidOptions)
	}
	if a.req.ExactSize {
		size := img.Header.VirtualSize
		if size <= 0 && !img.Format.NeedsConversion() && len(img.Compressions) == 0 && st.Size >= 0 {
			size = st.Size
		}
		switch {
		case size > 0:
			if err := a.checkExactSize(size); err != nil {
				return err
			}
		case !img.Format.NeedsConversion():
			// A compressed raw image or a stream: its size is only known
			// once it has been written, which is too late to refuse.
			return fmt.Errorf("exact size: the size of %s is unknown before writing (compressed raw or a stream); clone an uncompressed image or device: %w", a.req.Source, errdefs.ErrInvalidOptions)
		}
		// Other converted formats: Validate checks qemu-img's virtual size.
	}
	if a.req.ZeroTarget && a.target.Kind() == volume.Block {
		// Best effort: where the device cannot, the copy writes or zeroes
		// every zero run itself, as without the option.
		if err := a.target.ZeroAll(ctx, false); err != nil {
			a.log.Info("Zeroing the whole target is not possible; zero blocks will be written", "target", a.target.Path(), "err", err)
		} else {
			a.targetZeroed = true
			a.log.Info("Zeroed the whole target; zero blocks of the source are skipped", "target", a.target.Path(), "bytes", a.target.Capacity())
		}
	}
	return nil
}

// checkExactSize enforces Options.ExactSize: a device must be exactly size
// bytes, and a file must end up exactly size bytes (Resize would grow it to
// the requested size less the overhead, so that must not be larger).
func (a *attempt) checkExactSize(size int64) error {
	if !a.req.ExactSize {
		return nil
	}
	capacity := a.target.Capacity()
	if size > capacity {
		return fmt.Errorf("exact size: %w", a.target.TooSmall(size, "source size"))
	}
	if a.target.Kind() == volume.Block {
		if capacity != size {
			return fmt.Errorf("exact size: target device %s has %d bytes but the source %s has %d; an exact copy needs a target of the same size: %w",
				a.target.Path(), capacity, a.req.Source, size, errdefs.ErrInvalidOptions)
		}
		return nil
	}
	if a.req.Size > 0 {
		if grown := volume.UsableSize(capacity, a.req.FilesystemOverhead); grown > size {
			return fmt.Errorf("exact size: the requested size %d (usable %d after the filesystem overhead) would grow %s beyond the source's %d bytes; drop the size or make it match: %w",
				a.req.Size, grown, a.target.Path(), size, errdefs.ErrInvalidOptions)
		}
	}
	return nil
}

package engine

import (
	"context"
	"fmt"
	"os"
	"syscall"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/format"
	"github.com/diskimport/engine/internal/blockdev"
	"github.com/diskimport/engine/internal/volume"
)

// Clone is an import whose source is a local block device or image file.
// The copy itself is the core's (raw goes through the sparse volume.Writer,
// other formats through qemu-img); this file adds what a volume copy needs
// on top: an exact-size rule for storage migrations, a whole-device zeroing
// so zero blocks can be skipped, a refusal to copy a device onto itself, and
// a read-back verification of both sides (clone_verify.go).

// checkClone runs in Info once the source is identified and before any byte
// reaches the target.
func (j *job) checkClone(ctx context.Context, img *format.Stream, st *datasource.Stream) error {
	j.localSource = st.LocalPath
	if j.opts.Verify && st.LocalPath == "" {
		return fmt.Errorf("verify needs a source that can be read a second time (a local file or block device), and %s is a stream: %w", j.source, errdefs.ErrInvalidOptions)
	}
	if st.LocalPath != "" && j.tgt.Kind() == volume.Block {
		if err := refuseSameDevice(st.LocalPath, j.tgt.Path()); err != nil {
			return err
		}
	}
	if j.opts.ExactSize {
		size := img.Header.VirtualSize
		if size <= 0 && !img.Format.NeedsConversion() && len(img.Compressions) == 0 && st.Size >= 0 {
			size = st.Size
		}
		switch {
		case size > 0:
			if err := j.checkExactSize(size); err != nil {
				return err
			}
		case !img.Format.NeedsConversion():
			// A compressed raw image or a stream: its size is only known
			// once it has been written, which is too late to refuse.
			return fmt.Errorf("exact size: the size of %s is unknown before writing (compressed raw or a stream); clone an uncompressed image or device: %w", j.source, errdefs.ErrInvalidOptions)
		}
		// Other converted formats: Validate checks qemu-img's virtual size.
	}
	if j.opts.ZeroTarget && j.tgt.Kind() == volume.Block {
		j.targetZeroed = zeroDevice(ctx, j.tgt.Path(), j.tgt.Capacity(), j)
	}
	return nil
}

// checkExactSize enforces Options.ExactSize: a device must be exactly size
// bytes, and a file must end up exactly size bytes (Resize would grow it to
// the requested size less the overhead, so that must not be larger).
func (j *job) checkExactSize(size int64) error {
	if !j.opts.ExactSize {
		return nil
	}
	capacity := j.tgt.Capacity()
	if size > capacity {
		return fmt.Errorf("exact size: %w", &errdefs.SizeError{ImageSize: size, TargetSize: capacity, What: "source size"})
	}
	if j.tgt.Kind() == volume.Block {
		if capacity != size {
			return fmt.Errorf("exact size: target device %s has %d bytes but the source %s has %d; an exact copy needs a target of the same size: %w",
				j.tgt.Path(), capacity, j.source, size, errdefs.ErrInvalidOptions)
		}
		return nil
	}
	if j.opts.Size > 0 {
		if grown := volume.UsableSize(capacity, j.opts.FilesystemOverhead); grown > size {
			return fmt.Errorf("exact size: the requested size %d (usable %d after the filesystem overhead) would grow %s beyond the source's %d bytes; drop the size or make it match: %w",
				j.opts.Size, grown, j.tgt.Path(), size, errdefs.ErrInvalidOptions)
		}
	}
	return nil
}

// refuseSameDevice stops a clone of a device onto itself (through another
// name or a loop device's backing file it is not caught, but the common
// mistake of naming the same node twice is).
func refuseSameDevice(src, dst string) error {
	a, err := os.Stat(src)
	if err != nil {
		return nil // the source was just opened; a vanished name is not ours to judge
	}
	b, err := os.Stat(dst)
	if err != nil {
		return nil
	}
	as, aok := a.Sys().(*syscall.Stat_t)
	bs, bok := b.Sys().(*syscall.Stat_t)
	if aok && bok && as.Rdev == bs.Rdev && as.Rdev != 0 && a.Mode()&os.ModeDevice != 0 && b.Mode()&os.ModeDevice != 0 {
		return fmt.Errorf("source %s and target %s are the same block device: %w", src, dst, errdefs.ErrInvalidOptions)
	}
	if os.SameFile(a, b) {
		return fmt.Errorf("source %s and target %s are the same file: %w", src, dst, errdefs.ErrInvalidOptions)
	}
	return nil
}

// zeroDevice makes the whole device read zeros with BLKZEROOUT, so the copy
// may skip zero blocks. It reports whether that worked; on failure the copy
// simply writes or zeroes every zero run itself, as without the option.
// The descriptor is a second, non-exclusive one: the target holds the
// exclusive claim.
func zeroDevice(ctx context.Context, path string, size int64, j *job) bool {
	if ctx.Err() != nil {
		return false
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		j.log.Warn("Cannot open the target to zero it; zero blocks will be written", "target", path, "err", err)
		return false
	}
	defer f.Close()
	if err := blockdev.ZeroOut(f, 0, size); err != nil {
		j.log.Info("Zeroing the whole target is not possible; zero blocks will be written", "target", path, "err", err)
		return false
	}
	j.log.Info("Zeroed the whole target; zero blocks of the source are skipped", "target", path, "bytes", size)
	return true
}

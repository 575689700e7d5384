package engine

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/internal/volume"
)

// resize grows a file target to the requested size less the filesystem
// overhead (never shrinking it) and applies preallocation to streamed
// files. Block devices keep their size.
func (j *job) resize(ctx context.Context) error {
	if j.tgt.Kind() == volume.Block {
		if j.opts.Preallocation {
			// Every block of a device is already backed.
			j.result.PreallocationApplied = true
		}
		return nil
	}
	path := j.tgt.WritePath()
	size := j.result.VirtualSize
	if j.opts.Size > 0 {
		if usable := volume.UsableSize(j.tgt.Capacity(), j.opts.FilesystemOverhead); usable > size {
			size = usable
		}
	}
	if j.plan.OutputFormat == "qcow2" {
		if size > j.result.VirtualSize {
			if err := j.qemu.Resize(ctx, path, "qcow2", size, j.opts.Preallocation); err != nil {
				return fmt.Errorf("resizing %s to %d bytes: %w", j.tgt.Path(), size, err)
			}
			j.log.Info("Resized image", "size", size)
		}
		j.result.VirtualSize = size
		return nil
	}
	if err := growRaw(path, size, j.opts.Preallocation); err != nil {
		return fmt.Errorf("resizing %s to %d bytes: %w", j.tgt.Path(), size, err)
	}
	if size != j.result.VirtualSize {
		j.log.Info("Resized image", "from", j.result.VirtualSize, "to", size)
	}
	if j.opts.Preallocation {
		j.result.PreallocationApplied = true
	}
	j.result.VirtualSize = size
	return nil
}

// growRaw extends a raw file to size (never shrinks) and, when asked,
// allocates every block (holes included) with fallocate.
func growRaw(path string, size int64, preallocate bool) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() < size {
		if err := f.Truncate(size); err != nil {
			return err
		}
	}
	if preallocate && size > 0 {
		if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
			return fmt.Errorf("preallocating: %w", err)
		}
	}
	return nil
}

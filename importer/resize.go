package importer

import (
	"context"
	"fmt"

	"github.com/diskimport/engine/internal/volume"
)

// resize is Resize, which owns nothing of its own: it grows a file target
// to the requested size less the filesystem overhead (never shrinking it)
// and applies preallocation to streamed files. Block devices keep their
// size. The result's TargetSize is the size reached; VirtualSize stays the
// image's.
func (a *attempt) resize(ctx context.Context) error {
	if a.target.Kind() == volume.Block {
		a.result.TargetSize = a.target.Capacity()
		if a.req.Preallocation {
			// Every block of a device is already backed.
			a.result.PreallocationApplied = true
		}
		return nil
	}
	path := a.target.WritePath()
	size := a.result.VirtualSize
	if a.req.Size > 0 {
		if usable := volume.UsableSize(a.target.Capacity(), a.req.FilesystemOverhead); usable > size {
			size = usable
		}
	}
	if a.plan.OutputFormat == "qcow2" {
		if size > a.result.VirtualSize {
			if err := a.qemuImg().Resize(ctx, path, "qcow2", size, a.req.Preallocation); err != nil {
				return fmt.Errorf("resizing %s to %d bytes: %w", a.target.Path(), size, err)
			}
			a.log.Info("Resized image", "size", size)
		}
		a.result.TargetSize = size
		return nil
	}
	if err := volume.GrowFile(path, size, a.req.Preallocation); err != nil {
		return fmt.Errorf("resizing %s to %d bytes: %w", a.target.Path(), size, err)
	}
	if size != a.result.VirtualSize {
		a.log.Info("Resized image", "from", a.result.VirtualSize, "to", size)
	}
	if a.req.Preallocation {
		a.result.PreallocationApplied = true
	}
	a.result.TargetSize = size
	return nil
}

package importer

import (
	"context"
	"fmt"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/volume"
)

// blankInfo is Info for a blank disk (request.Blank): it checks the
// request, opens the target and plans routeBlank (Resize, Commit).
func (a *attempt) blankInfo(ctx context.Context) (*importPlan, error) {
	if err := checkBlankRequest(a.req); err != nil {
		return nil, err
	}
	if err := a.openTarget(ctx); err != nil {
		return nil, err
	}
	plan, why := decide(&importFacts{blank: true}, a.req)
	a.log.Info("Import planned", "route", plan.Route.String(), "reason", why, "phases", plan.Phases)
	return plan, nil
}

// checkBlankRequest refuses options no target could satisfy.
func checkBlankRequest(r request) error {
	if r.Target == "" {
		return fmt.Errorf("blank disk: target is required: %w", errdefs.ErrInvalidOptions)
	}
	switch r.Format {
	case "", "raw", "qcow2":
	default:
		return fmt.Errorf("blank disk: format %q: want raw or qcow2: %w", r.Format, errdefs.ErrInvalidOptions)
	}
	if r.Size < 0 {
		return fmt.Errorf("blank disk: size %d is negative: %w", r.Size, errdefs.ErrInvalidOptions)
	}
	if r.FilesystemOverhead < 0 || r.FilesystemOverhead >= 1 {
		return fmt.Errorf("blank disk: filesystem overhead %v: want a fraction in [0, 1): %w", r.FilesystemOverhead, errdefs.ErrInvalidOptions)
	}
	return nil
}

// createBlank is routeBlank's Resize: the disk at its size (qemu-img
// create, a sparse or preallocated file, or a zeroed device).
func (a *attempt) createBlank(ctx context.Context) error {
	if a.target.Kind() == volume.Block {
		return a.blankBlock(ctx)
	}
	return a.blankFile(ctx)
}

// commitBlank is routeBlank's Commit.
func (a *attempt) commitBlank(ctx context.Context) error {
	if err := a.commit(ctx); err != nil {
		return err
	}
	a.log.Info("Blank disk created", "target", a.result.Target, "virtualSize", a.result.VirtualSize, "preallocation", a.result.PreallocationApplied)
	return nil
}

func (a *attempt) blankFile(ctx context.Context) error {
	tgt, r, res := a.target, a.req, &a.result
	if r.Size == 0 {
		return fmt.Errorf("blank disk: a size is required for file target %s: %w", tgt.Path(), errdefs.ErrInvalidOptions)
	}
	// The size the user asked for, not Capacity: a sparse file needs no
	// free space, and free space must not shrink the disk.
	size := volume.UsableSize(r.Size, r.FilesystemOverhead)
	if size <= 0 {
		return fmt.Errorf("blank disk: size %d less overhead %v leaves no whole MiB: %w", r.Size, r.FilesystemOverhead, errdefs.ErrInvalidOptions)
	}
	if r.Preallocation && size > tgt.Capacity() {
		return tgt.TooSmall(size, "preallocated disk size")
	}
	res.VirtualSize, res.TargetSize = size, size
	if r.Format == "qcow2" {
		// qemu-img create replaces the (empty) temporary file; Commit reopens
		// it by name.
		if err := a.qemuImg().Create(ctx, tgt.WritePath(), "qcow2", size, r.Preallocation); err != nil {
			return fmt.Errorf("creating qcow2 image %s: %w", tgt.Path(), err)
		}
		res.SourceFormat = "qcow2"
	} else {
		if err := volume.GrowFile(tgt.WritePath(), size, r.Preallocation); err != nil {
			return fmt.Errorf("creating %d-byte image %s: %w", size, tgt.Path(), err)
		}
	}
	res.PreallocationApplied = r.Preallocation
	return nil
}

func (a *attempt) blankBlock(ctx context.Context) error {
	size := a.target.Capacity()
	if a.req.Size > size {
		return &errdefs.SizeError{ImageSize: a.req.Size, TargetSize: size, What: "requested size"}
	}
	a.result.VirtualSize, a.result.TargetSize = size, size
	if !a.req.Preallocation {
		a.log.Info("Block target left as it is", "target", a.target.Path(), "size", size)
		return nil
	}
	if err := a.target.ZeroAll(ctx, true); err != nil {
		return err
	}
	a.result.PreallocationApplied = true
	return nil
}

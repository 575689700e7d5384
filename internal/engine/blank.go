package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/volume"
	"github.com/diskimport/engine/qemu"
)

// CreateBlank makes an empty disk on o.Target through the machine, with a
// plan of its own: Info (options, target), Resize (the disk at its size:
// qemu-img create, a sparse or preallocated file, or a zeroed device),
// Commit, Complete.
func CreateBlank(ctx context.Context, o BlankRequest) (*Result, error) {
	start := time.Now()
	res := &Result{Target: o.Target}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	var tgt *volume.Target
	defer func() {
		if tgt != nil {
			tgt.Close() // removes the temporary file unless committed
		}
	}()
	info := func(ctx context.Context) (*Plan, error) {
		if err := checkBlankRequest(o); err != nil {
			return nil, err
		}
		t, err := volume.Open(ctx, volume.Options{Path: o.Target, RequestedSize: o.Size, FilesystemOverhead: o.FilesystemOverhead, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("opening target %s: %w", o.Target, err)
		}
		tgt = t
		res.Target = tgt.Path()
		if o.Format == "qcow2" && tgt.Kind() == volume.Block {
			return nil, fmt.Errorf("blank disk: target %s is a block device, which holds raw data only: %w", tgt.Path(), errdefs.ErrInvalidOptions)
		}
		plan, why := decide(&importFacts{blank: true}, Request{Settings: Settings{Format: o.Format}})
		log.Info("Import planned", "route", plan.Route.String(), "reason", why, "phases", plan.Phases)
		return plan, nil
	}
	steps := func(*Plan) map[Phase]Step {
		return map[Phase]Step{
			Resize: func(ctx context.Context) error {
				if tgt.Kind() == volume.Block {
					return blankBlock(ctx, tgt, o, res, log)
				}
				return blankFile(ctx, tgt, o, res, log)
			},
			Commit: tgt.Commit,
		}
	}
	m := &Machine{Logger: log}
	_, phases, err := m.Run(ctx, info, steps)
	res.Phases = phases
	res.Duration = time.Since(start)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, errdefs.ErrCancelled) {
			err = fmt.Errorf("%w: %w", errdefs.ErrCancelled, err)
		}
		res.PreallocationApplied = false
		return res, err
	}
	res.Complete = true
	log.Info("Blank disk created", "target", res.Target, "virtualSize", res.VirtualSize, "preallocation", res.PreallocationApplied)
	return res, nil
}

// checkBlankRequest refuses options no target could satisfy.
func checkBlankRequest(o BlankRequest) error {
	if o.Target == "" {
		return fmt.Errorf("blank disk: target is required: %w", errdefs.ErrInvalidOptions)
	}
	switch o.Format {
	case "", "raw", "qcow2":
	default:
		return fmt.Errorf("blank disk: format %q: want raw or qcow2: %w", o.Format, errdefs.ErrInvalidOptions)
	}
	if o.Size < 0 {
		return fmt.Errorf("blank disk: size %d is negative: %w", o.Size, errdefs.ErrInvalidOptions)
	}
	if o.FilesystemOverhead < 0 || o.FilesystemOverhead >= 1 {
		return fmt.Errorf("blank disk: filesystem overhead %v: want a fraction in [0, 1): %w", o.FilesystemOverhead, errdefs.ErrInvalidOptions)
	}
	return nil
}

func blankFile(ctx context.Context, tgt *volume.Target, o BlankRequest, res *Result, log *slog.Logger) error {
	if o.Size == 0 {
		return fmt.Errorf("blank disk: a size is required for file target %s: %w", tgt.Path(), errdefs.ErrInvalidOptions)
	}
	// The size the user asked for, not Capacity: a sparse file needs no
	// free space, and free space must not shrink the disk.
	size := volume.UsableSize(o.Size, o.FilesystemOverhead)
	if size <= 0 {
		return fmt.Errorf("blank disk: size %d less overhead %v leaves no whole MiB: %w", o.Size, o.FilesystemOverhead, errdefs.ErrInvalidOptions)
	}
	if o.Preallocation && size > tgt.Capacity() {
		return &errdefs.SizeError{ImageSize: size, TargetSize: tgt.Capacity(), What: "preallocated disk size"}
	}
	res.VirtualSize, res.TargetSize = size, size
	if o.Format == "qcow2" {
		runner := o.Qemu
		if runner == nil {
			runner = &qemu.Runner{Logger: log}
		}
		res.Sandbox = runner.Sandbox()
		log.Info("qemu-img sandbox", "sandbox", res.Sandbox)
		// qemu-img create replaces the (empty) temporary file; Commit reopens
		// it by name.
		if err := runner.Create(ctx, tgt.WritePath(), "qcow2", size, o.Preallocation); err != nil {
			return fmt.Errorf("creating qcow2 image %s: %w", tgt.Path(), err)
		}
		res.SourceFormat = "qcow2"
	} else {
		if err := volume.GrowFile(tgt.WritePath(), size, o.Preallocation); err != nil {
			return fmt.Errorf("creating %d-byte image %s: %w", size, tgt.Path(), err)
		}
	}
	res.PreallocationApplied = o.Preallocation
	return nil
}

func blankBlock(ctx context.Context, tgt *volume.Target, o BlankRequest, res *Result, log *slog.Logger) error {
	size := tgt.Capacity()
	if o.Size > size {
		return &errdefs.SizeError{ImageSize: o.Size, TargetSize: size, What: "requested size"}
	}
	res.VirtualSize, res.TargetSize = size, size
	if !o.Preallocation {
		log.Info("Block target left as it is", "target", tgt.Path(), "size", size)
		return nil
	}
	if err := tgt.ZeroAll(ctx, true); err != nil {
		return err
	}
	res.PreallocationApplied = true
	return nil
}

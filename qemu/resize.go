package qemu

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/diskimport/engine/errdefs"
)

// Resize runs qemu-img resize -f FORMAT [--preallocation=MODE] PATH SIZE.
// With preallocate it tries falloc, then full when the driver rejects falloc.
func (r *Runner) Resize(ctx context.Context, path, format string, size int64, preallocate bool) error {
	if format == "" {
		return fmt.Errorf("qemu-img resize %s: format is required (probing is not allowed): %w", path, errdefs.ErrInvalidOptions)
	}
	if size <= 0 {
		return fmt.Errorf("qemu-img resize %s: size %d must be positive: %w", path, size, errdefs.ErrInvalidOptions)
	}
	modes := []string{""}
	if preallocate {
		modes = []string{"falloc", "full"}
	}
	for i, m := range modes {
		args := []string{"resize", "-f", format}
		if m != "" {
			args = append(args, "--preallocation="+m)
		}
		// "--" so a size is never taken for an option (shrinking needs an
		// explicit --shrink, which we never pass).
		args = append(args, "--", path, strconv.FormatInt(size, 10))
		res, err := r.run(ctx, runSpec{sub: "resize", args: args, limits: r.Limits.merge(defaultMetaLimits), writes: []string{path}})
		if err == nil {
			return nil
		}
		if i == len(modes)-1 || ctx.Err() != nil || !strings.Contains(res.stderr, unsupportedPrealloc) {
			return err
		}
		r.logger().Info("resize preallocation mode unsupported, falling back", "tried", m, "next", modes[i+1])
	}
	return nil
}

// Create runs qemu-img create -f FORMAT [-o preallocation=falloc] PATH SIZE.
func (r *Runner) Create(ctx context.Context, path, format string, size int64, preallocate bool) error {
	if format == "" {
		return fmt.Errorf("qemu-img create %s: format is required: %w", path, errdefs.ErrInvalidOptions)
	}
	if size <= 0 {
		return fmt.Errorf("qemu-img create %s: size %d must be positive: %w", path, size, errdefs.ErrInvalidOptions)
	}
	args := []string{"create", "-q", "-f", format}
	if preallocate {
		args = append(args, "-o", "preallocation=falloc")
	}
	args = append(args, "--", path, strconv.FormatInt(size, 10))
	created, err := createTarget(path)
	if err != nil {
		return fmt.Errorf("qemu-img create: %w", err)
	}
	_, err = r.run(ctx, runSpec{sub: "create", args: args, limits: r.Limits.merge(defaultMetaLimits), writes: []string{path}})
	if err != nil && created {
		_ = os.Remove(path)
	}
	return err
}

package engine

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/format"
)

// validation is Validate: it checks the image qemu-img is about to read
// (structure, no references to other files, a virtual size that fits the
// target). On the ranged route it starts the NBD export of the HTTP object
// and hands it to in, which owns it from then on.
type validation struct {
	a  *attempt
	in *imageInput
}

func (v *validation) run(ctx context.Context) error {
	a, in := v.a, v.in
	if a.plan.Route == RouteRanged {
		// Served to qemu-img over NBD until Convert ends (rangedExport).
		if err := v.startExport(ctx); err != nil {
			return err
		}
	}
	if a.plan.Route == RouteInPlace {
		// A local image converted in place: hash it before trusting it.
		if err := a.source.drain(a); err != nil {
			return err
		}
	}
	if a.plan.Route != RouteRanged { // a remote image was checked, on its HTTP bytes, as its export started
		if err := format.CheckStructureFile(in.format, in.path); err != nil {
			return err
		}
	}
	info, err := a.qemu.Info(ctx, in.path, in.format.QemuName())
	if err != nil {
		if rerr := in.export.cause(err); rerr != err {
			return rerr // the HTTP side failed, not the image
		}
		return fmt.Errorf("%w: %w", errdefs.ErrInvalidImage, err)
	}
	// What qemu-img itself opened, on every path alike: the very source
	// it will convert must be nothing but the image.
	if err := info.CheckSelfContained(selfNames(in.path, in.export)...); err != nil {
		return err
	}
	if err := a.qemu.Check(ctx, in.path, in.format.QemuName()); err != nil {
		return in.export.cause(err)
	}
	a.result.VirtualSize = info.VirtualSize
	if capacity := a.target.Capacity(); info.VirtualSize > capacity {
		return &errdefs.SizeError{ImageSize: info.VirtualSize, TargetSize: capacity}
	}
	return a.checkExactSize(info.VirtualSize)
}

// selfNames lists the names qemu-img may report for the image it opened
// as src: a local path (absolute and as given), or the URI of our NBD
// export's socket.
func selfNames(src string, export *rangedExport) []string {
	if export != nil {
		sock := export.unix.SocketPath()
		return []string{src, "nbd+unix://?socket=" + sock, "nbd+unix:///?socket=" + sock}
	}
	names := []string{src}
	if abs, err := filepath.Abs(src); err == nil {
		names = append(names, abs)
	}
	return names
}

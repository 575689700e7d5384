package importer

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/nbdserver"
	"github.com/diskimport/engine/qemu"
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
	if a.plan.Route == routeRanged {
		// Served to qemu-img over NBD until Convert ends
		// (nbdserver.ImageExport).
		if err := v.startExport(ctx); err != nil {
			return err
		}
	}
	if a.plan.Route == routeInPlace {
		// A local image converted in place: hash it before trusting it.
		if err := a.source.drain(a); err != nil {
			return err
		}
	}
	info, err := a.checkImage(ctx, in)
	if err != nil {
		return err
	}
	a.result.VirtualSize = info.VirtualSize
	if capacity := a.target.Capacity(); info.VirtualSize > capacity {
		return a.target.TooSmall(info.VirtualSize, errdefs.VirtualImageSize)
	}
	return a.checkExactSize(info.VirtualSize)
}

// checkImage is the verdict on the image qemu-img is about to read, in:
// its structure (a remote image's was checked on its HTTP bytes as its
// export started), what qemu-img itself opened (the very source it will
// convert must be nothing but the image) and qemu-img's own check.
// Validate runs it before Convert; Inspect gives the same verdict on a
// local image without importing it.
func (a *attempt) checkImage(ctx context.Context, in *imageInput) (*qemu.ImageInfo, error) {
	if in.export == nil {
		if err := format.CheckStructureFile(in.format, in.path); err != nil {
			return nil, err
		}
	}
	info, err := a.qemuImg().Info(ctx, in.path, in.format.QemuName())
	if err != nil {
		if rerr := in.export.Cause(err); rerr != err {
			return nil, rerr // the HTTP side failed, not the image
		}
		if errors.Is(err, errdefs.ErrToolMissing) {
			return nil, err // a setup error, not a verdict on the image
		}
		return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidImage, err)
	}
	if err := info.CheckSelfContained(selfNames(in.path, in.export)...); err != nil {
		return nil, err
	}
	if err := a.qemuImg().Check(ctx, in.path, in.format.QemuName()); err != nil {
		return nil, in.export.Cause(err)
	}
	return info, nil
}

// selfNames lists the names qemu-img may report for the image it opened
// as src: a local path (absolute and as given), or the URI of our NBD
// export's socket.
func selfNames(src string, export *nbdserver.ImageExport) []string {
	if export != nil {
		return append([]string{src}, export.QemuNames()...)
	}
	names := []string{src}
	if abs, err := filepath.Abs(src); err == nil {
		names = append(names, abs)
	}
	return names
}

// startExport serves the remote image, hands the export to in (qemu-img
// reads in.path, its spec) and runs the structural checks qemu-img cannot
// be trusted with on the same bytes.
func (v *validation) startExport(ctx context.Context) error {
	in := v.in
	if in.export == nil {
		open := func(ctx context.Context) (nbdserver.ImageReader, error) {
			r, err := v.a.caps.Ranges.Open(ctx)
			if err != nil {
				return nil, err
			}
			return r, nil
		}
		e, err := nbdserver.ServeImage(ctx, open, nbdserver.ImageExportOptions{Wire: &v.a.meter.rangedRead, Logger: v.a.log})
		if err != nil {
			return err
		}
		in.export = e
		in.path = e.QemuSpec()
	}
	err := format.CheckStructure(in.format, in.export.ReaderAt(), in.export.Size())
	if err != nil && !errors.Is(err, errdefs.ErrInvalidImage) {
		// A read failure, not a verdict on the image.
		err = fmt.Errorf("checking the %s image over HTTP: %w", in.format, err)
	}
	return err
}

package importer

import (
	"context"
	"errors"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/format"
)

// inspectSource runs what Info does with the source (open it, peel
// compression, identify the image and check its header, decide the plan)
// and, for a local image qemu-img would read in place, Validate's checks;
// it opens no target and writes nothing. request.Target is ignored. An
// image the import would refuse is reported in RefusedErr; other errors
// (an unreachable source) are returned.
func inspectSource(ctx context.Context, r request) (*Inspection, error) {
	a := newAttempt(r)
	defer a.cleanup()
	in := &Inspection{Source: r.Source.String(), VirtualSize: -1, SourceSize: -1, AllocatedSize: -1, UncompressedSize: -1}
	st, err := a.openSource(ctx)
	in.SourceFormat, in.Compressions = a.result.SourceFormat, a.result.Compressions
	var refusedHeader *format.HeaderError
	if errors.As(err, &refusedHeader) {
		in.SourceFormat, in.Compressions = string(refusedHeader.Format), nil
		for _, c := range refusedHeader.Compressions {
			in.Compressions = append(in.Compressions, string(c))
		}
	}
	if err != nil {
		return in, refusal(in, err)
	}
	in.SourceSize = st.Size
	img := a.source.image
	if v := img.Header.VirtualSize; v > 0 {
		in.VirtualSize = v
	} else if !img.Format.NeedsConversion() && len(img.Compressions) == 0 {
		in.VirtualSize = st.Size
	}
	if err := inspectRawEnd(ctx, in, img, st); err != nil {
		return in, refusal(in, err)
	}
	if a.caps.LocalPath != "" {
		in.AllocatedSize = localAllocatedSize(a.caps.LocalPath)
	}
	if len(img.Compressions) > 0 && img.Compressions[0] == format.XZ {
		in.UncompressedSize = a.xzUncompressedSize(ctx, st)
		if in.VirtualSize < 0 && len(img.Compressions) == 1 && img.Format == format.Raw {
			in.VirtualSize = in.UncompressedSize
		}
	}
	plan := a.choosePlan(a.gatherFacts(ctx, a.sourceFacts()))
	in.Route, in.Phases, in.ScratchNeeded = plan.Route.String(), plan.Phases, plan.Route == routeScratch
	if plan.Route == routeInPlace {
		info, err := a.checkImage(ctx, &imageInput{path: a.caps.LocalPath, format: img.Format})
		if err != nil {
			return in, refusal(in, err)
		}
		in.VirtualSize = info.VirtualSize
	}
	return in, nil
}

// inspectRawEnd judges the end of an uncompressed raw image whose end can
// be read now (a local file or device, a server that serves ranges) as the
// stream route does at its end (format.CheckRawEnd): a fixed VHD's footer
// makes it a VHD whose disk is the bytes before the footer, a DMG's trailer
// a refusal. The end of a plain stream is known only once it is read.
func inspectRawEnd(ctx context.Context, in *Inspection, img *format.Image, st *datasource.Transfer) error {
	if img.Format != format.Raw || len(img.Compressions) > 0 || st.Size < format.FixedVHDFooterLen {
		return nil
	}
	tail, err := readTail(ctx, st, format.FixedVHDFooterLen)
	if err != nil || tail == nil {
		return err
	}
	footer, err := format.CheckRawEnd(tail, st.Size-format.FixedVHDFooterLen)
	if err != nil {
		return err
	}
	if footer {
		in.SourceFormat = string(format.VHD)
		in.VirtualSize = st.Size - format.FixedVHDFooterLen
	}
	return nil
}

// refusal files an error that is a verdict on the image in in (RefusedErr,
// Refused, Reason; no route) and returns the others.
func refusal(in *Inspection, err error) error {
	if errors.Is(err, errdefs.ErrInvalidImage) || errors.Is(err, errdefs.ErrUnsafeImage) || errors.Is(err, errdefs.ErrUnsupportedFormat) {
		in.RefusedErr, in.Refused, in.Reason = err, err.Error(), Reason(err)
		in.Route, in.Phases, in.ScratchNeeded = "", nil, false
		return nil
	}
	return err
}

// xzUncompressedSize reads the index at the end of an .xz source (a local
// file, or over ranges) for its uncompressed size; -1 when the source
// cannot be read that way or its index does not add up.
func (a *attempt) xzUncompressedSize(ctx context.Context, st *datasource.Transfer) int64 {
	r, err := openAtRandom(ctx, st)
	if r == nil && err == nil {
		return -1
	}
	var n int64
	if err == nil {
		n, err = format.XZUncompressedSize(r, r.Size())
		r.Close()
	}
	if err != nil {
		a.log.Debug("xz index not read", "error", err)
		return -1
	}
	return n
}

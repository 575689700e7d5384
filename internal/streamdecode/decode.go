package streamdecode

import (
	"context"
	"fmt"
	"io"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/format"
)

// Decode dispatches to the decoder of format f (as format.Open found it);
// formats without one give errdefs.ErrNotStreamable.
func Decode(ctx context.Context, r io.Reader, f format.Format, sink Sink, o Options) (Stats, error) {
	switch f {
	case format.QCOW2:
		return DecodeQCOW2(ctx, r, sink, o)
	case format.VMDK:
		return DecodeVMDK(ctx, r, sink, o)
	case format.VHD:
		return DecodeVHD(ctx, r, sink, o)
	case format.VDI:
		return DecodeVDI(ctx, r, sink, o)
	case format.VHDX:
		return DecodeVHDX(ctx, r, sink, o)
	}
	return Stats{}, fmt.Errorf("streamdecode: no stream decoder for %s: %w", f, errdefs.ErrNotStreamable)
}

// Supports reports whether img, as format.Open found it, has a stream
// decoder: a qcow2, a streamOptimized vmdk (the other sparse vmdks have no
// grain markers to follow), a dynamic VHD (a fixed one is raw data and a
// footer, streamed as raw; a differencing one is refused by its header)
// a dynamic or static VDI, or a VHDX (its size checked against
// Options.TargetSize once its metadata has passed). A decoder may still find mid-stream that the
// layout needs more than one pass (errdefs.ErrNotStreamable).
func Supports(img *format.Image) bool {
	switch img.Format {
	case format.QCOW2:
		return true
	case format.VMDK:
		return format.IsStreamOptimizedVMDK(img.Format, img.Header)
	case format.VHD:
		return img.Header.VHDDiskType == vhdDynamic
	case format.VDI:
		return img.Header.VDIImageType == 1 || img.Header.VDIImageType == 2
	case format.VHDX:
		return true
	}
	return false
}

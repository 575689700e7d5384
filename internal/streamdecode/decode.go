package streamdecode

import (
	"context"
	"fmt"
	"io"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/format"
)

// Decode dispatches to the decoder of format f (as format.Open found it);
// formats without one give errdefs.ErrNotStreamable.
func Decode(ctx context.Context, r io.Reader, f format.Format, sink Sink, o Options) (Stats, error) {
	switch f {
	case format.QCOW2:
		return DecodeQCOW2(ctx, r, sink, o)
	case format.VMDK:
		return DecodeVMDK(ctx, r, sink, o)
	}
	return Stats{}, fmt.Errorf("streamdecode: no stream decoder for %s: %w", f, errdefs.ErrNotStreamable)
}

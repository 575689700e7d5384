package datasource

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/ctxio"
)

type readerSource struct {
	name   string
	r      io.Reader
	size   int64 // -1: unknown
	opened atomic.Bool
}

// NewReader wraps a one-shot stream such as standard input or an upload
// body. It can be opened once; its size is unknown and it has no LocalPath.
// Closing the Transfer body does not close r: whoever supplied r owns it.
func NewReader(name string, r io.Reader) Source { return &readerSource{name: name, r: r, size: -1} }

// NewSizedReader is NewReader of a stream whose size its supplier knows
// (and holds it to: the Transfer only reports it).
func NewSizedReader(name string, r io.Reader, size int64) Source {
	return &readerSource{name: name, r: r, size: size}
}

func (s *readerSource) String() string { return s.name }

func (s *readerSource) Open(ctx context.Context) (*Transfer, error) {
	if err := ctx.Err(); err != nil {
		return nil, ctxio.Cancelled("reading "+s.name, err)
	}
	if !s.opened.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("source %s is a one-time stream and was already opened: %w", s.name, errdefs.ErrInvalidOptions)
	}
	return &Transfer{
		Body:         ctxio.NewReader(ctx, "reading "+s.name, s.r),
		Size:         s.size,
		Capabilities: Capabilities{OneTime: true},
	}, nil
}

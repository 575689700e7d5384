package datasource

import (
	"context"
	"fmt"
	"io"

	"github.com/diskimport/engine/errdefs"
)

// ctxReader makes local reads (files, stdin) stop at the next Read once the
// caller's context is done, since those reads have no cancellation of
// their own.
type ctxReader struct {
	ctx   context.Context
	name  string
	r     io.Reader
	close func() error
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, cancelError(c.name, err)
	}
	return c.r.Read(p)
}

func (c *ctxReader) Close() error {
	if c.close == nil {
		return nil
	}
	return c.close()
}

// cancelError wraps a context error so callers can match either the context
// error itself or errdefs.ErrCancelled.
func cancelError(name string, ctxErr error) error {
	return fmt.Errorf("reading %s: %w: %w", name, errdefs.ErrCancelled, ctxErr)
}

package datasource

import (
	"context"
	"fmt"
	"os"
)

// ReadTail returns the last n bytes of a transfer whose end can be read
// ahead of its body: a local file or device (Capabilities.LocalPath) or an
// HTTP object served with ranges (Capabilities.Ranges). It returns nil and
// no error for a plain stream, a transfer shorter than n, or a server that
// does not serve the range after all: the caller then decides at the end
// of the stream.
func ReadTail(ctx context.Context, t *Transfer, n int) ([]byte, error) {
	if t.Size < int64(n) {
		return nil, nil
	}
	tail := make([]byte, n)
	off := t.Size - int64(n)
	if path := t.LocalPath; path != "" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("reading the end of %s: %w", path, err)
		}
		defer f.Close()
		if _, err := f.ReadAt(tail, off); err != nil {
			return nil, fmt.Errorf("reading the last %d bytes of %s: %w", n, path, err)
		}
		return tail, nil
	}
	if r := t.Ranges; r != nil {
		rr, err := r.Open(ctx)
		if err != nil {
			return nil, err
		}
		defer rr.Close()
		if got, err := rr.ReadAt(tail, off); err != nil || got != n {
			return nil, nil
		}
		return tail, nil
	}
	return nil, nil
}

package importer

// The import's reads of a source beyond the one stream a
// datasource.Transfer's Body gives: at random (its local file, or its
// object over ranges), its end ahead of the stream, what reading a local
// image costs, and how often the source retried. Sources declare what
// allows it (the Transfer's Capabilities); these are the import's use of
// those declarations, not part of the extension point a custom source
// implements.

import (
	"context"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/diskimport/engine/datasource"
)

// sizedReaderAt is a transfer's bytes read at random: its local file or
// device, or its HTTP object over ranges.
type sizedReaderAt interface {
	io.ReaderAt
	io.Closer
	Size() int64
}

// sizedFile is a local file or device of the size its transfer gave.
type sizedFile struct {
	*os.File
	size int64
}

func (f sizedFile) Size() int64 { return f.size }

// openAtRandom opens the bytes of a transfer for reads at random: its local
// file or device (Capabilities.LocalPath, of the transfer's size) or its
// HTTP object (Capabilities.Ranges). It returns nil and no error for a
// plain stream, whose bytes come only in order.
func openAtRandom(ctx context.Context, t *datasource.Transfer) (sizedReaderAt, error) {
	if path := t.LocalPath; path != "" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		return sizedFile{File: f, size: t.Size}, nil
	}
	if r := t.Ranges; r != nil {
		rr, err := r.Open(ctx)
		if err != nil {
			return nil, err // not a nil *RangeReader in the interface
		}
		return rr, nil
	}
	return nil, nil
}

// readTail returns the last n bytes of a transfer whose end can be read
// ahead of its body (OpenAtRandom). It returns nil and no error for a plain
// stream, a transfer shorter than n, or a server that does not serve the
// range after all: the caller then decides at the end of the stream.
func readTail(ctx context.Context, t *datasource.Transfer, n int) ([]byte, error) {
	if t.Size < int64(n) {
		return nil, nil
	}
	r, err := openAtRandom(ctx, t)
	if err != nil && t.LocalPath != "" {
		return nil, fmt.Errorf("reading the end of %s: %w", t.LocalPath, err)
	}
	if r == nil || err != nil {
		return nil, err
	}
	defer r.Close()
	tail := make([]byte, n)
	if _, err := r.ReadAt(tail, t.Size-int64(n)); err != nil {
		if t.LocalPath != "" {
			return nil, fmt.Errorf("reading the last %d bytes of %s: %w", n, t.LocalPath, err)
		}
		return nil, nil
	}
	return tail, nil
}

// localAllocatedSize is what reading the local image at path costs: its
// allocated bytes (a reader that skips holes, as qemu-img does, reads no
// more), at most its size; a device's or a file's size when the allocation
// is not known, 0 when path cannot be read.
func localAllocatedSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	size := st.Size()
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && st.Mode().IsRegular() {
		return min(size, sys.Blocks*512)
	}
	if size == 0 {
		if f, err := os.Open(path); err == nil {
			size, _ = f.Seek(0, io.SeekEnd)
			f.Close()
		}
	}
	return size
}

// sourceRetries returns how many times src re-sent a request after a failure
// (reconnects, resumes, retried statuses) over its life, or 0 for a source
// that does not report it (it is no [datasource.RetryReporter]).
func sourceRetries(src datasource.Source) int {
	if r, ok := src.(datasource.RetryReporter); ok {
		return r.Retries()
	}
	return 0
}

package datasource

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/ctxio"
)

// Runs is a disk's bytes as runs, for a sender that knows where its zeros
// are (a clone's data and zero records): each run is data, or a count of
// zero bytes that never crossed as bytes, at an offset. An image's runs
// cover it in order from offset 0, each starting where the last ended.
type Runs interface {
	// NextRun returns the next run at off: data (len(data) > 0, valid
	// until the next call), or with data nil, zeros zero bytes. After the
	// last run it returns io.EOF; any other error ends the runs.
	NextRun(ctx context.Context) (off int64, data []byte, zeros int64, err error)
	// Digest is the sender's content digest of the whole disk
	// (blk-sha256:hex, what importer.Result.ContentDigest holds), read
	// once NextRun returned io.EOF; "" when it sent none. An import that
	// writes the runs fails with errdefs.ErrVerifyMismatch before Commit
	// where the disk it wrote has another.
	Digest() string
}

// RunsFrom is Runs whose data runs the importer can read straight into
// its own buffers, one copy of every byte less (a clone's data records
// read off the connection: on a fully written 2 GiB clone the receiving
// half's CPU went from 1.07 to 1.01 times the sending half's).
// NextRunFrom is NextRun with a data run given as the next n bytes (at
// most 4 MiB) of data, a reader valid until the next call: the importer
// reads all n or stops at data's error, and such an error does not end
// the runs. The run was not taken: the next
// call gives a run at the same offset again (data's source resumed) or
// ends the runs with its own error.
type RunsFrom interface {
	Runs
	NextRunFrom(ctx context.Context) (off int64, data io.Reader, n, zeros int64, err error)
}

// NewRuns is a one-time source of size bytes given as runs: its Transfer
// has Runs, and a Body that reads the same runs as bytes (zeros expanded)
// for an import that needs the bytes. It can be opened once.
func NewRuns(name string, runs Runs, size int64) Source {
	return &runsSource{name: name, runs: runs, size: size}
}

type runsSource struct {
	name   string
	runs   Runs
	size   int64
	opened atomic.Bool
}

func (s *runsSource) String() string { return s.name }

func (s *runsSource) Open(ctx context.Context) (*Transfer, error) {
	if err := ctx.Err(); err != nil {
		return nil, ctxio.Cancelled("reading "+s.name, err)
	}
	if !s.opened.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("source %s is a one-time stream and was already opened: %w", s.name, errdefs.ErrInvalidOptions)
	}
	return &Transfer{
		Body:         &runsReader{ctx: ctx, runs: s.runs},
		Size:         s.size,
		Capabilities: Capabilities{OneTime: true},
		Runs:         s.runs,
	}, nil
}

// runsReader reads runs as bytes.
type runsReader struct {
	ctx   context.Context
	runs  Runs
	off   int64
	data  []byte
	zeros int64
	err   error
}

func (r *runsReader) Read(p []byte) (int, error) {
	for len(r.data) == 0 && r.zeros == 0 {
		if r.err != nil {
			return 0, r.err
		}
		off, data, zeros, err := r.runs.NextRun(r.ctx)
		switch {
		case err != nil:
			r.err = err
		case off != r.off:
			r.err = fmt.Errorf("a run at %d where %d bytes were read: %w", off, r.off, errdefs.ErrInvalidImage)
		default:
			r.data, r.zeros = data, zeros
		}
	}
	var n int
	if len(r.data) > 0 {
		n = copy(p, r.data)
		r.data = r.data[n:]
	} else {
		n = int(min(int64(len(p)), r.zeros))
		clear(p[:n])
		r.zeros -= int64(n)
	}
	r.off += int64(n)
	return n, nil
}

func (r *runsReader) Close() error { return nil }

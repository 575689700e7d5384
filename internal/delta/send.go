package delta

import (
	"context"
	"fmt"
	"os"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blkhash"
)

// MaxRun bounds one data run: a wire record's limit, and what is read and
// hashed at a time.
const MaxRun = 4 << 20

// Run is a range of blocks the target must take: zeros, or the source's
// bytes.
type Run struct {
	Off, Len int64
	Zero     bool
}

// Changes lists the runs of blocks where src and base differ, in offset
// order: blocks of zeros in the source as zero runs, the others as data
// runs of at most MaxRun bytes.
func Changes(src, base *Signature) []Run {
	var runs []Run
	zero := blkhash.ZeroBlockSum()
	for i := range src.Sums {
		if src.Sums[i] == base.Sums[i] {
			continue
		}
		off := int64(i) * BlockSize
		n := min(BlockSize, src.Size-off)
		z := src.Sums[i] == zero
		if k := len(runs) - 1; k >= 0 && runs[k].Off+runs[k].Len == off && runs[k].Zero == z && (z || runs[k].Len+n <= MaxRun) {
			runs[k].Len += n
			continue
		}
		runs = append(runs, Run{Off: off, Len: n, Zero: z})
	}
	return runs
}

// Sink takes a pass's runs in offset order: a Target, or the wire's
// encoder.
type Sink interface {
	Data(off int64, p []byte) error
	Zero(off, n int64) error
}

// Stats counts a pass.
type Stats struct {
	// Size is the volume's size in bytes.
	Size int64 `json:"size"`
	// Blocks is the volume's block count, BlocksChanged those sent.
	Blocks        int64 `json:"blocks"`
	BlocksChanged int64 `json:"blocksChanged"`
	// DataBytes were read and sent; ZeroBytes were sent as zero runs.
	DataBytes int64 `json:"dataBytes"`
	ZeroBytes int64 `json:"zeroBytes"`
}

// Count sums runs into a pass's Stats.
func Count(size int64, runs []Run) Stats {
	s := Stats{Size: size, Blocks: Blocks(size)}
	for _, r := range runs {
		s.BlocksChanged += Blocks(r.Len)
		if r.Zero {
			s.ZeroBytes += r.Len
		} else {
			s.DataBytes += r.Len
		}
	}
	return s
}

// Send reads the data runs from src and gives the runs that end after
// from to sink. The hashes of the bytes read replace src's in sig, so
// sig's digest is the source as sent even when it changed since it was
// signed; moved says whether it had.
func Send(ctx context.Context, src *os.File, sig *Signature, runs []Run, from int64, sink Sink) (moved bool, err error) {
	buf := make([]byte, MaxRun)
	for _, r := range runs {
		if r.Off+r.Len <= from {
			continue
		}
		if err := ctx.Err(); err != nil {
			return moved, fmt.Errorf("delta pass: %w: %w", errdefs.ErrCancelled, err)
		}
		if r.Zero {
			if err := sink.Zero(r.Off, r.Len); err != nil {
				return moved, err
			}
			continue
		}
		p := buf[:r.Len]
		if _, err := src.ReadAt(p, r.Off); err != nil {
			return moved, fmt.Errorf("reading the delta source at %d: %w", r.Off, err)
		}
		first := r.Off / BlockSize
		for i, sum := range blkhash.SumBlocks(p, 0) {
			if sig.Sums[first+int64(i)] != sum {
				sig.Sums[first+int64(i)] = sum
				moved = true
			}
		}
		if err := sink.Data(r.Off, p); err != nil {
			return moved, err
		}
	}
	if moved {
		sig.Digest = blkhash.DigestOfSums(sig.Sums, sig.Size)
	}
	return moved, nil
}

// Recheck tells whether the source changed during the pass: the pass was
// then of a source no one wrote to, and final. For a regular file whose
// stamp, taken before it was first read, can be trusted, wait compares
// the stamp (no reading). Otherwise (a device, a file being written) it
// starts signing src again, in the background, and wait reports whether
// that matched sig as it was when Recheck was called. Starting it once
// src was first signed, while the runs are sent, is enough: every block is
// then read again after its first reading, so a match means the source
// held still over an instant at which the target got it whole. wait must
// be called; stop ends the signing early (a failed pass).
func Recheck(ctx context.Context, src *os.File, sig *Signature, before Stamp) (wait func() (bool, error), stop func()) {
	if before.ok {
		wait = func() (bool, error) { return before.unchangedSince(src), nil }
		return wait, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	want := sig.Digest
	type result struct {
		d   blkhash.Digest
		err error
	}
	done := make(chan result, 1)
	go func() {
		// The digest alone: no second copy of the block hashes (32 bytes
		// per 64 KiB, 256 MiB for a 500 GiB volume).
		d, err := blkhash.SumFile(ctx, src, sig.Size, 0)
		done <- result{d, err}
	}()
	var r *result
	wait = func() (bool, error) {
		if r == nil {
			got := <-done
			r = &got
			cancel()
		}
		if r.err != nil {
			return false, r.err
		}
		return r.d == want, nil
	}
	return wait, func() {
		cancel()
		_, _ = wait()
	}
}

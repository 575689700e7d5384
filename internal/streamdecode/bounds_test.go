package streamdecode

import (
	"context"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/hostileimg"
)

// decodeGenerated decodes what write produces, streamed through a pipe,
// into a disk of size bytes, and reports the bytes the decode allocated:
// an upper bound of what it held at once, whatever the garbage collector
// did meanwhile.
func decodeGenerated(t *testing.T, dec decodeFunc, size int64, o Options, write func(w io.Writer) error) ([]byte, Stats, uint64, error) {
	t.Helper()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(write(pw)) }()
	defer pr.Close()
	m := &memSink{t: t, b: make([]byte, size)}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	st, err := dec(context.Background(), pr, m, o)
	runtime.ReadMemStats(&after)
	return m.b, st, after.TotalAlloc - before.TotalAlloc, err
}

// decoderFixedBytes is what a decode allocates beyond its bookkeeping
// budget: the stream chunks (4 x 4 MiB), inflate and output buffers, the
// writer goroutine's buffer, the test's pipe.
const decoderFixedBytes = 24 << 20

// A streamOptimized vmdk whose header names up to 62.5 MiB of grain
// tables ahead of its grains, 16.4 million grains that never come: what
// the decoder holds for them is charged to MaxBuffered, so the decode
// allocates little more than the tables' own bytes (it allocated 1.2 GiB
// when it kept a map entry per expected grain), and the image is refused:
// for the grains missing, or, when tables and the bits of the grains met
// pass the budget, as a bookkeeping *BufferError.
func TestVMDKTablesAheadStayInBudget(t *testing.T) {
	for _, tables := range []int{30000, 32000} {
		_, _, alloc, err := decodeGenerated(t, DecodeVMDK, 1<<20, Options{}, func(w io.Writer) error {
			return hostileimg.VMDKTablesAhead(w, tables)
		})
		t.Logf("%d grain tables: allocated %d MiB: %v", tables, alloc>>20, err)
		var be *BufferError
		switch {
		case tables == 30000 && !errors.Is(err, errdefs.ErrInvalidImage):
			t.Errorf("%d grain tables: %v, want ErrInvalidImage (grains missing)", tables, err)
		case tables == 32000 && (!errors.As(err, &be) || !be.Bookkeeping):
			t.Errorf("%d grain tables: %v, want a bookkeeping *BufferError", tables, err)
		}
		if alloc > DefaultMaxBuffered+decoderFixedBytes {
			t.Errorf("%d grain tables: the decode allocated %d MiB, more than its %d MiB budget and %d MiB of buffers", tables, alloc>>20, DefaultMaxBuffered>>20, decoderFixedBytes>>20)
		}
	}
}

// Empty grain tables in VMware's layout are remembered until the grain
// directory says which it uses: 16 bytes each, against MaxBuffered. Past
// it the decode stops with a bookkeeping *BufferError
// (ErrNotStreamable), not with memory growing by the table; within it the
// image decodes.
func TestVMDKManyTablesCharged(t *testing.T) {
	const max = 1 << 20
	_, _, _, err := decodeGenerated(t, DecodeVMDK, 512<<10, Options{MaxBuffered: max}, func(w io.Writer) error {
		return hostileimg.VMDKManyTables(w, 100000)
	})
	var be *BufferError
	if !errors.As(err, &be) || !be.Bookkeeping || !errors.Is(err, errdefs.ErrNotStreamable) {
		t.Fatalf("100000 grain tables in a %d-byte budget: %v, want a bookkeeping *BufferError", max, err)
	}
	got, _, _, err := decodeGenerated(t, DecodeVMDK, 512<<10, Options{MaxBuffered: max}, func(w io.Writer) error {
		return hostileimg.VMDKManyTables(w, 1000)
	})
	if err != nil {
		t.Fatalf("1000 grain tables: %v", err)
	}
	if !isZeroBytes(got, make([]byte, 4096)) {
		t.Errorf("the empty disk decoded with data")
	}
}

// A dynamic VHD's block table of 3.3 million allocated entries: the
// decode allocates no more than its 64 MiB budget and its buffers (it
// allocated about 240 MB when the extents were grown by append and
// copied once more to sort them).
func TestVHDBlockTableStaysInBudget(t *testing.T) {
	const entries = DefaultMaxBuffered / 20
	_, _, alloc, err := decodeGenerated(t, DecodeVHD, 1<<20, Options{}, func(w io.Writer) error {
		return hostileimg.VHDManyBlocks(w, 1<<20, entries)
	})
	t.Logf("allocated %d MiB: %v", alloc>>20, err)
	if !errors.Is(err, errdefs.ErrInvalidImage) {
		t.Errorf("decode: %v, want ErrInvalidImage (blocks past the end)", err)
	}
	if alloc > DefaultMaxBuffered+decoderFixedBytes {
		t.Errorf("the decode allocated %d MiB, more than its %d MiB budget and %d MiB of buffers", alloc>>20, DefaultMaxBuffered>>20, decoderFixedBytes>>20)
	}
}

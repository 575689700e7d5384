package streamdecode

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testkit/testimg"
)

// rawDisk writes a raw disk of size bytes where about dataPct percent of
// the 64 KiB blocks hold data (random bytes or compressible text, some
// blocks only partly), the rest zeros; seeded so runs repeat.
func rawDisk(t testing.TB, path string, size int64, dataPct int, seed uint64) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	const block = 64 << 10
	buf := make([]byte, block)
	text := []byte("The quick brown fox jumps over the lazy dog. 0123456789\n")
	for off := int64(0); off < size; off += block {
		if rng.IntN(100) >= dataPct {
			continue
		}
		n := min(int64(block), size-off)
		b := buf[:n]
		switch rng.IntN(3) {
		case 0:
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
		case 1:
			for i := 0; i < len(b); i += len(text) {
				copy(b[i:], text)
			}
		default:
			clear(b)
			k := rng.IntN(len(b))
			for i := k; i < min(len(b), k+4096); i++ {
				b[i] = byte(i*7 + 1)
			}
		}
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.WriteAt([]byte("END-OF-TEST-DISK"), size-16); err != nil {
		t.Fatal(err)
	}
	return path
}

// plainQCOW2 converts a raw disk (rawDisk's size, dataPct and seed) to
// NAME.qcow2 with qemu-img's defaults, in a new directory, and returns its
// path and the disk qemu-img reads from it.
func plainQCOW2(t testing.TB, name string, size int64, dataPct int, seed uint64) (img string, want []byte) {
	t.Helper()
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := rawDisk(t, filepath.Join(dir, "disk.raw"), size, dataPct, seed)
	img = makeQCOW2(t, dir, raw, qcow2Case{name: name})
	return img, reference(t, img, "qcow2")
}

// reference converts an image to raw with qemu-img.
func reference(t testing.TB, img, fmtName string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "ref.raw")
	testimg.Run(t, "qemu-img", "convert", "-q", "-f", fmtName, "-O", "raw", img, out)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// memSink is a Sink in memory that checks the writes stay inside the disk.
type memSink struct {
	t    testing.TB
	b    []byte
	zero bool // also a ZeroSink
}

func (m *memSink) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(m.b)) {
		m.t.Errorf("write of %d bytes at %d outside the %d-byte disk", len(p), off, len(m.b))
		return 0, io.ErrShortWrite
	}
	return copy(m.b[off:], p), nil
}

type memZeroSink struct{ *memSink }

func (m memZeroSink) ZeroAt(off, n int64) error {
	if off < 0 || off+n > int64(len(m.b)) {
		m.t.Errorf("zero of %d bytes at %d outside the %d-byte disk", n, off, len(m.b))
		return io.ErrShortWrite
	}
	clear(m.b[off : off+n])
	return nil
}

// choppy returns reads of varied, odd lengths, to cross every boundary.
type choppy struct {
	r   io.Reader
	rng *rand.Rand
}

func (c *choppy) Read(p []byte) (int, error) {
	n := 1 + c.rng.IntN(min(len(p), 1<<20))
	if c.rng.IntN(4) == 0 {
		n = min(n, 1+c.rng.IntN(700))
	}
	return c.r.Read(p[:n])
}

type decodeFunc func(ctx context.Context, r io.Reader, sink Sink, o Options) (Stats, error)

// decodeFile decodes the image at path into memory, through a sink that
// reads zeros where nothing is written, or, with zeroSink, through a sink
// prefilled with garbage that is told the zero ranges.
func decodeFile(t testing.TB, dec decodeFunc, path string, size int64, zeroSink bool, o Options) ([]byte, Stats, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := &memSink{t: t, b: make([]byte, size)}
	var sink Sink = m
	if zeroSink {
		for i := range m.b {
			m.b[i] = 0xa5
		}
		sink = memZeroSink{m}
	}
	r := &choppy{r: f, rng: rand.New(rand.NewPCG(uint64(size), 7))}
	st, err := dec(context.Background(), r, sink, o)
	return m.b, st, err
}

func firstDiff(a, b []byte) int {
	if len(a) != len(b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return len(a)
}

func sameBytes(t testing.TB, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("decoded disk differs from qemu-img's (sizes %d/%d, first difference at byte %d)", len(got), len(want), firstDiff(got, want))
	}
}

// stalledSink holds every write until released (its first closes
// stalled), then takes them as memSink does. The writes wait on a channel,
// a wait a synctest bubble sees, not on a mutex.
type stalledSink struct {
	*memSink
	first   atomic.Bool
	stalled chan struct{} // closed once the first write waits
	release chan struct{}
}

func (s *stalledSink) WriteAt(p []byte, off int64) (int, error) {
	if s.first.CompareAndSwap(false, true) {
		close(s.stalled)
	}
	<-s.release
	return s.memSink.WriteAt(p, off)
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// readWhileTheFirstWriteWaits decodes img (2 Go workers) into a sink that
// holds its first write until the decoder stops reading, and returns how
// many bytes of img it read by then; the decode must then finish with the
// disk want. The decode runs in a synctest bubble: synctest.Wait returns
// once the decoder and its workers are all blocked (the file's reads never
// block), so "stopped reading" is a fact, not a quiet 200 ms a loaded
// machine can produce early.
func readWhileTheFirstWriteWaits(t *testing.T, dec decodeFunc, img string, want []byte) int64 {
	t.Helper()
	var read int64
	synctest.Test(t, func(t *testing.T) {
		f, err := os.Open(img)
		require.NoError(t, err)
		defer f.Close()
		in := &countingReader{r: f}
		sink := &stalledSink{memSink: &memSink{t: t, b: make([]byte, len(want))}, stalled: make(chan struct{}), release: make(chan struct{})}
		done := make(chan error, 1)
		go func() {
			// Go's workers: a child's pipes are blocked in system calls,
			// which synctest.Wait does not count as blocked.
			_, err := dec(context.Background(), in, sink, Options{Workers: 2, InflateChild: "-"})
			done <- err
		}()
		<-sink.stalled
		synctest.Wait()
		read = in.n.Load()
		close(sink.release)
		require.NoError(t, <-done)
		sameBytes(t, sink.b, want)
	})
	return read
}

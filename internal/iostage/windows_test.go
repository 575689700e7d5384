package iostage

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randomData is n bytes that do not repeat. (testimg.RandomBytes cannot
// serve: testimg imports blkhash, which imports this package.)
func randomData(n int, seed byte) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{seed}).Read(b)
	return b
}

// countingAt counts the reads that reach the object, and can fail them.
type countingAt struct {
	r     *bytes.Reader
	reads atomic.Int64
	fail  atomic.Bool
}

var errBroken = errors.New("connection broke")

func (c *countingAt) ReadAt(p []byte, off int64) (int, error) {
	c.reads.Add(1)
	if c.fail.Load() {
		return 0, errBroken
	}
	return c.r.ReadAt(p, off)
}

// Small reads in file order, many at once and out of order within a few
// windows (qemu-img's coroutines), give the object's bytes and reach the
// object in far fewer requests than reads.
func TestWindowReaderAtConcurrentRuns(t *testing.T) {
	size := 5*windowSize + 12345 // a short last window
	data := randomData(size, 1)
	src := &countingAt{r: bytes.NewReader(data)}
	ra := NewWindowReaderAt(src, int64(size))
	const piece = 20000 // odd, so pieces cross window boundaries
	offs := make(chan int)
	var wg sync.WaitGroup
	var reads, bad atomic.Int64
	for range 16 {
		wg.Go(func() {
			for off := range offs {
				p := make([]byte, min(piece, size-off))
				n, err := ra.ReadAt(p, int64(off))
				reads.Add(1)
				if n != len(p) || (err != nil && err != io.EOF) || !bytes.Equal(p, data[off:off+n]) {
					bad.Add(1)
				}
			}
		})
	}
	for off := 0; off < size; off += piece {
		offs <- off
	}
	close(offs)
	wg.Wait()
	assert.Zero(t, bad.Load(), "reads with wrong bytes or errors")
	assert.Less(t, src.reads.Load(), reads.Load()/10, "read-ahead did not merge the reads")

	// Past the end: EOF with what there is.
	p := make([]byte, 100)
	n, err := ra.ReadAt(p, int64(size-40))
	assert.Equal(t, 40, n)
	assert.ErrorIs(t, err, io.EOF)
	assert.Equal(t, data[size-40:], p[:40])
}

// A run through many windows reuses the buffers of the windows it left:
// its windows cost about windowsKept buffers, not one each (a ranged
// convert of a 197 MB compressed qcow2 allocated 108 MB of windows, which
// with the garbage collector's slack held the importer at 150-190 MiB).
func TestWindowReaderAtReusesTheBuffersOfEvictedWindows(t *testing.T) {
	size := 32 * windowSize
	data := randomData(size, 6)
	ra := NewWindowReaderAt(bytes.NewReader(data), int64(size))
	const piece = 65536
	offs := make(chan int, 64)
	var wg sync.WaitGroup
	var bad atomic.Int64
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 8 {
		wg.Go(func() {
			p := make([]byte, piece)
			for off := range offs {
				n, err := ra.ReadAt(p, int64(off))
				if n != piece || err != nil || !bytes.Equal(p, data[off:off+n]) {
					bad.Add(1)
				}
			}
		})
	}
	for off := 0; off < size; off += piece {
		offs <- off
	}
	close(offs)
	wg.Wait()
	runtime.ReadMemStats(&after)
	assert.Zero(t, bad.Load(), "reads with wrong bytes or errors")
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d MiB allocated reading %d MiB through %d MiB windows", allocated>>20, size>>20, windowSize>>20)
	assert.Less(t, allocated, uint64((windowsKept+4)*windowSize))
}

// A lone small read far from the last one, and a big read, go straight to
// the object: a window would fetch megabytes for them.
func TestWindowReaderAtLeavesRandomAndBigReads(t *testing.T) {
	size := 64 << 20
	data := randomData(size, 2)
	src := &countingAt{r: bytes.NewReader(data)}
	ra := NewWindowReaderAt(src, int64(size))
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		off := rng.IntN(size - 65536)
		p := make([]byte, 65536)
		n, err := ra.ReadAt(p, int64(off))
		require.NoError(t, err)
		require.Equal(t, data[off:off+n], p)
		// Far from the previous: every read is its own request.
		ra.mu.Lock()
		ra.lastEnd = -1
		ra.mu.Unlock()
	}
	assert.EqualValues(t, 20, src.reads.Load())
	p := make([]byte, 2<<20)
	_, err := ra.ReadAt(p, 1000)
	require.NoError(t, err)
	assert.Equal(t, data[1000:1000+len(p)], p)
	assert.EqualValues(t, 21, src.reads.Load())
}

// A failed window fails the reads waiting for it with the object's error,
// and is fetched again by the next read.
func TestWindowReaderAtErrorIsNotCached(t *testing.T) {
	size := 3 * windowSize
	data := randomData(size, 5)
	src := &countingAt{r: bytes.NewReader(data)}
	ra := NewWindowReaderAt(src, int64(size))
	p := make([]byte, 4096)
	_, err := ra.ReadAt(p, 0) // starts the run
	require.NoError(t, err)
	src.fail.Store(true)
	_, err = ra.ReadAt(p, 4096)
	require.ErrorIs(t, err, errBroken)
	src.fail.Store(false)
	n, err := ra.ReadAt(p, 8192)
	require.NoError(t, err)
	assert.Equal(t, data[8192:8192+n], p)
}

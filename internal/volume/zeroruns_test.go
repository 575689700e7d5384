//go:build linux

package volume_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/volume"
)

// testRun is zeros zero bytes, or data.
type testRun struct {
	data  []byte
	zeros int
}

// runsOf cuts img into runs as a clone sender would and a few ways it
// would not (zero runs off granules, inside the held first MiB, across a
// chunk's end, data runs of odd lengths): every zero stretch of at least
// minZero bytes becomes a zero run.
func runsOf(img []byte, minZero int) []testRun {
	var runs []testRun
	start := 0
	for i := 0; i < len(img); {
		if img[i] != 0 {
			i++
			continue
		}
		j := i
		for j < len(img) && img[j] == 0 {
			j++
		}
		if j-i >= minZero {
			if i > start {
				runs = append(runs, testRun{data: img[start:i]})
			}
			runs = append(runs, testRun{zeros: j - i})
			start = j
		}
		i = j
	}
	if start < len(img) {
		runs = append(runs, testRun{data: img[start:]})
	}
	return runs
}

// writeRuns writes runs through Write and WriteZeros and finishes.
func writeRuns(t *testing.T, tg *volume.Target, runs []testRun, opts ...volume.WriterOption) *volume.Writer {
	t.Helper()
	w, err := tg.NewWriter(opts...)
	require.NoError(t, err)
	for _, r := range runs {
		if r.data != nil {
			_, err = w.Write(r.data)
		} else {
			err = w.WriteZeros(int64(r.zeros))
		}
		require.NoError(t, err)
	}
	_, err = w.Finish()
	require.NoError(t, err)
	return w
}

// runsWriter writes runs to a target and finishes.
type runsWriter func(t *testing.T, tg *volume.Target, runs []testRun, opts ...volume.WriterOption) *volume.Writer

// requireRunsLand writes runs with write onto a file and onto a device
// over old data: each must then hold img, and the content digest be
// want; check looks at the file's Writer too.
func requireRunsLand(t *testing.T, img []byte, want blkhash.Digest, runs []testRun, write runsWriter, check func(*testing.T, *volume.Writer)) {
	ctx := context.Background()
	t.Run("file", func(t *testing.T) {
		tg, err := volume.Open(ctx, volume.Options{Path: t.TempDir()})
		require.NoError(t, err)
		defer tg.Close()
		h := blkhash.New(0)
		w := write(t, tg, runs, volume.WithContentHash(h))
		assert.Equal(t, int64(len(img)), w.Written())
		if check != nil {
			check(t, w)
		}
		require.NoError(t, tg.Commit(ctx))
		requireFileHolds(t, tg.Path(), img)
		assert.Equal(t, want, h.Sum(), "the content digest of the runs is the bytes'")
	})
	t.Run("device", func(t *testing.T) {
		needRoot(t)
		dev := newLoop(t, 24*mib, fillRandom(5))
		before := readDev(t, dev, 0, 24*mib)
		tg, err := volume.Open(ctx, volume.Options{Path: dev})
		require.NoError(t, err)
		defer tg.Close()
		h := blkhash.New(0)
		write(t, tg, runs, volume.WithContentHash(h), volume.WithContext(ctx))
		require.NoError(t, tg.Commit(ctx))
		require.NoError(t, tg.Close())
		requireImageOver(t, dev, img, before)
		assert.Equal(t, want, h.Sum())
	})
}

// Zero runs handed over as lengths land as the bytes would have: the same
// disk on a file (its holes kept) and on a device over old data, the same
// content digest, and none of their bytes counted as data written.
func TestWriteZerosLandsAsTheBytesWould(t *testing.T) {
	const size = 21*mib + 4097
	img := makeImage(7, size, 0.5)
	clear(img[100:700_000])                 // inside the held first MiB, off granules
	clear(img[4*mib-1000 : 4*mib+3*65536])  // across a chunk's end
	clear(img[9*mib : 9*mib+300*mib/100])   // a long run
	copy(img[9*mib+100_000:], "in the run") // data that splits it off a granule
	whole := blkhash.New(0)
	_, _ = whole.Write(img)
	wantDigest := whole.Sum()
	for _, minZero := range []int{1, 512, 65536} {
		runs := runsOf(img, minZero)
		skipped := wholeZeroGranules(runs)
		t.Run(fmt.Sprintf("zero runs from %d bytes", minZero), func(t *testing.T) {
			requireRunsLand(t, img, wantDigest, runs, writeRuns, func(t *testing.T, w *volume.Writer) {
				assert.LessOrEqual(t, w.DataBytes(), int64(len(img)-skipped), "zero runs are not written as data")
			})
		})
	}
}

// wholeZeroGranules is the bytes of the whole granules inside runs' zero
// runs: never data.
func wholeZeroGranules(runs []testRun) int {
	skipped, off := 0, 0
	for _, r := range runs {
		if r.zeros > 0 {
			from, to := (off+65535)/65536*65536, (off+r.zeros)/65536*65536
			skipped += max(0, to-from)
		}
		off += len(r.data) + r.zeros
	}
	return skipped
}

// A zero run that passes the target's capacity is refused before anything
// of it is taken, as data would be.
func TestWriteZerosPastCapacityIsRefused(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	dev := newLoop(t, 4*mib, fillRandom(3))
	tg, err := volume.Open(ctx, volume.Options{Path: dev})
	require.NoError(t, err)
	defer tg.Close()
	w, err := tg.NewWriter()
	require.NoError(t, err)
	_, err = w.Write([]byte("data"))
	require.NoError(t, err)
	err = w.WriteZeros(4 * mib)
	require.ErrorIs(t, err, errdefs.ErrTargetTooSmall)
	assert.Equal(t, int64(4), w.Written())
}

// runReader is a stream that knows its zero runs, as a decoder child's
// is: ReadRun gives data as bytes (at most len(p) at a time) and zero
// runs as runs, then err (io.EOF when nil); reads counts the calls of
// Read, which expands the runs.
type runReader struct {
	runs  []testRun
	err   error
	reads int
}

func newRunReader(runs []testRun, err error) *runReader {
	return &runReader{runs: slices.Clone(runs), err: err}
}

func (r *runReader) ReadRun(p []byte) (int, int64, error) {
	for len(r.runs) > 0 && len(r.runs[0].data) == 0 && r.runs[0].zeros == 0 {
		r.runs = r.runs[1:]
	}
	if len(r.runs) == 0 {
		if r.err != nil {
			return 0, 0, r.err
		}
		return 0, 0, io.EOF
	}
	run := &r.runs[0]
	if run.zeros > 0 {
		z := run.zeros
		run.zeros = 0
		return 0, int64(z), nil
	}
	n := copy(p, run.data)
	run.data = run.data[n:]
	return n, 0, nil
}

func (r *runReader) Read(p []byte) (int, error) {
	r.reads++
	if len(r.runs) > 0 && r.runs[0].zeros > 0 {
		n := min(len(p), r.runs[0].zeros)
		clear(p[:n])
		r.runs[0].zeros -= n
		return n, nil
	}
	n, _, err := r.ReadRun(p)
	return n, err
}

func (r *runReader) KnowsRuns() bool { return true }

// readRunsFrom writes runs through ReadFrom of a stream that knows them,
// and finishes.
func readRunsFrom(t *testing.T, tg *volume.Target, runs []testRun, opts ...volume.WriterOption) *volume.Writer {
	t.Helper()
	w, err := tg.NewWriter(opts...)
	require.NoError(t, err)
	src := newRunReader(runs, nil)
	n, err := w.ReadFrom(src)
	require.NoError(t, err)
	assert.Equal(t, w.Written(), n)
	assert.Zero(t, src.reads, "ReadFrom took the runs, not the bytes")
	_, err = w.Finish()
	require.NoError(t, err)
	return w
}

// A stream that knows where its zeros are (a decoder child's) lands
// through ReadFrom as its bytes would: the same disk on a file and on a
// device over old data, the same content digest, its zero runs taken as
// runs, never read as bytes or written as data.
func TestReadFromTakesAStreamsZeroRunsAsRuns(t *testing.T) {
	const size = 21*mib + 4097
	img := makeImage(11, size, 0.5)
	clear(img[100:700_000])                // inside the held first MiB, off granules
	clear(img[4*mib-1000 : 4*mib+3*65536]) // across a chunk's end
	clear(img[9*mib : 12*mib])             // a long run
	whole := blkhash.New(0)
	_, _ = whole.Write(img)
	wantDigest := whole.Sum()
	for _, minZero := range []int{512, 65536} {
		runs := runsOf(img, minZero)
		skipped := wholeZeroGranules(runs)
		t.Run(fmt.Sprintf("zero runs from %d bytes", minZero), func(t *testing.T) {
			requireRunsLand(t, img, wantDigest, runs, readRunsFrom, func(t *testing.T, w *volume.Writer) {
				assert.LessOrEqual(t, w.DataBytes(), int64(len(img)-skipped), "zero runs are not written as data")
			})
		})
	}
}

// A stream that knows its runs and does not fit, is cancelled or fails
// ends ReadFrom as a stream of bytes would: too small names the target,
// a cancel reads no more, a source's failure is the source's.
func TestReadFromRunsEndsAsAStreamOfBytesWould(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	open := func(t *testing.T) *volume.Writer {
		tg, err := volume.Open(ctx, volume.Options{Path: newLoop(t, 4*mib, fillRandom(3))})
		require.NoError(t, err)
		t.Cleanup(func() { tg.Close() })
		w, err := tg.NewWriter()
		require.NoError(t, err)
		return w
	}
	data := makeImage(3, mib, 0)
	t.Run("data past capacity", func(t *testing.T) {
		_, err := open(t).ReadFrom(newRunReader([]testRun{{zeros: 3*mib + 512}, {data: data}}, nil))
		require.ErrorIs(t, err, errdefs.ErrTargetTooSmall)
	})
	t.Run("zeros past capacity", func(t *testing.T) {
		_, err := open(t).ReadFrom(newRunReader([]testRun{{data: data}, {zeros: 4 * mib}}, nil))
		require.ErrorIs(t, err, errdefs.ErrTargetTooSmall)
	})
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctx)
		tg, err := volume.Open(ctx, volume.Options{Path: newLoop(t, 4*mib, fillRandom(3))})
		require.NoError(t, err)
		t.Cleanup(func() { tg.Close() })
		w, err := tg.NewWriter(volume.WithContext(ctx))
		require.NoError(t, err)
		src := &cancellingRuns{runReader: newRunReader([]testRun{{data: data}, {zeros: mib}, {data: data}}, nil), cancel: cancel}
		_, err = w.ReadFrom(src)
		require.ErrorIs(t, err, errdefs.ErrCancelled)
		assert.Equal(t, 1, src.calls, "nothing read after the context ended")
	})
	t.Run("the source fails", func(t *testing.T) {
		boom := errors.New("connection reset")
		w := open(t)
		_, err := w.ReadFrom(newRunReader([]testRun{{data: data}, {zeros: mib}}, boom))
		require.ErrorIs(t, err, boom)
		assert.Contains(t, err.Error(), fmt.Sprintf("offset %d", 2*mib))
	})
}

// cancellingRuns ends the context after its first run.
type cancellingRuns struct {
	*runReader
	cancel func()
	calls  int
}

func (c *cancellingRuns) ReadRun(p []byte) (int, int64, error) {
	c.calls++
	defer c.cancel()
	return c.runReader.ReadRun(p)
}

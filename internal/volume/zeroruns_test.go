//go:build linux

package volume_test

import (
	"context"
	"fmt"
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
		// The whole granules of zero runs are never data.
		skipped, off := 0, 0
		for _, r := range runs {
			if r.zeros > 0 {
				from, to := (off+65535)/65536*65536, (off+r.zeros)/65536*65536
				skipped += max(0, to-from)
			}
			off += len(r.data) + r.zeros
		}
		t.Run(fmt.Sprintf("zero runs from %d bytes", minZero), func(t *testing.T) {
			requireRunsLand(t, img, wantDigest, runs, writeRuns, func(t *testing.T, w *volume.Writer) {
				assert.LessOrEqual(t, w.DataBytes(), int64(len(img)-skipped), "zero runs are not written as data")
			})
		})
	}
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

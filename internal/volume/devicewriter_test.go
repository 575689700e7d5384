//go:build linux

package volume_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/volume"
)

// piece is one request a converter might send: data or a zero range.
type piece struct {
	off, n int
	zero   bool
}

// pieces cuts img into requests of varied size, many of them not aligned
// to the device's blocks, several straddling the end of the held-back MiB,
// in shuffled order; zero runs of the image become zero requests.
func pieces(img []byte, seed uint64) []piece {
	rng := rand.New(rand.NewPCG(seed, 7))
	var ps []piece
	cuts := []int{mib - 100, mib + 300} // straddle the head's end
	for off := 0; off < len(img); {
		n := 1 + rng.IntN(256<<10)
		if rng.IntN(2) == 0 {
			n = (n + 4095) &^ 4095 // most converter writes are aligned
		}
		for _, c := range cuts {
			if off < c && off+n > c && rng.IntN(2) == 0 {
				n = c - off
			}
		}
		n = min(n, len(img)-off)
		zero := true
		for _, b := range img[off : off+n] {
			if b != 0 {
				zero = false
				break
			}
		}
		ps = append(ps, piece{off, n, zero})
		off += n
	}
	rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	return ps
}

// Written out of order from several goroutines, with unaligned requests and
// zero ranges, the device holds the image after Finish; before it, the
// first MiB reads zeros, while ReadAt already shows the image.
func TestDeviceWriterHoldsHeadUntilFinish(t *testing.T) {
	const size = 8*mib + 512
	dev := newLoop(t, 10*mib, fillRandom(3))
	img := makeImage(11, size, 0.4)
	tgt, err := volume.Open(context.Background(), volume.Options{Path: dev})
	require.NoError(t, err)
	defer tgt.Close()
	w, err := tgt.NewDeviceWriter(context.Background(), volume.DeviceWriterOptions{})
	require.NoError(t, err)
	assert.EqualValues(t, 10*mib, w.Size())

	ps := pieces(img, 5)
	work := make(chan piece)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for p := range work {
				if p.zero {
					assert.NoError(t, w.ZeroAt(int64(p.off), int64(p.n), p.off%2 == 0, false))
				} else {
					_, err := w.WriteAt(img[p.off:p.off+p.n], int64(p.off))
					assert.NoError(t, err)
				}
			}
		})
	}
	for _, p := range ps {
		work <- p
	}
	close(work)
	wg.Wait()
	require.NoError(t, w.Sync())
	assert.EqualValues(t, size, w.Written())
	assert.Less(t, w.DataBytes(), int64(size))

	requireSameBytes(t, make([]byte, mib), readDev(t, dev, 0, mib))
	got := make([]byte, size)
	_, err = w.ReadAt(got, 0)
	require.NoError(t, err)
	requireSameBytes(t, img, got)
	unaligned := make([]byte, 3000)
	_, err = w.ReadAt(unaligned, mib-1000)
	require.NoError(t, err)
	requireSameBytes(t, img[mib-1000:mib+2000], unaligned)

	require.NoError(t, w.Finish(context.Background()))
	require.NoError(t, tgt.Commit(context.Background()))
	requireSameBytes(t, img, readDev(t, dev, 0, size))
	_, err = w.WriteAt([]byte{1}, mib)
	assert.ErrorIs(t, err, errdefs.ErrInvalidOptions, "a write after Finish")
}

// A cancelled import never writes the head, and writes past the device
// fail with ENOSPC (which the NBD server passes on as such).
func TestDeviceWriterCancelAndBounds(t *testing.T) {
	dev := newLoop(t, 4*mib, fillRandom(4))
	old := readDev(t, dev, 0, 4*mib)
	tgt, err := volume.Open(context.Background(), volume.Options{Path: dev})
	require.NoError(t, err)
	defer tgt.Close()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := tgt.NewDeviceWriter(ctx, volume.DeviceWriterOptions{})
	require.NoError(t, err)

	_, err = w.WriteAt(make([]byte, 4096), 4*mib-2048)
	assert.ErrorIs(t, err, unix.ENOSPC)
	assert.ErrorIs(t, w.ZeroAt(4*mib, 512, true, false), unix.ENOSPC)

	head := make([]byte, mib)
	for i := range head {
		head[i] = 0x42
	}
	_, err = w.WriteAt(head, 0)
	require.NoError(t, err)
	cancel()
	_, err = w.WriteAt(head[:4096], 2*mib)
	assert.ErrorIs(t, err, errdefs.ErrCancelled)
	assert.ErrorIs(t, w.Finish(context.Background()), errdefs.ErrCancelled)
	requireSameBytes(t, old, readDev(t, dev, 0, 4*mib))
}

// A file target has no device writer: qemu-img writes its temporary file.
func TestDeviceWriterRefusesFiles(t *testing.T) {
	tgt, err := volume.Open(context.Background(), volume.Options{Path: t.TempDir() + "/disk.img"})
	require.NoError(t, err)
	defer tgt.Close()
	_, err = tgt.NewDeviceWriter(context.Background(), volume.DeviceWriterOptions{})
	assert.ErrorIs(t, err, errdefs.ErrInvalidOptions)
}

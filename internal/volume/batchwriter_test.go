//go:build linux

package volume_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/internal/volume"
)

// sinkReq is one call the decoder might make: data at off, or zeros.
type sinkReq struct {
	off, n int64
	zero   bool
}

// sinkDevice attaches a loop device of size bytes (filled with 0xA5, so
// a range that should have been zeroed shows) and opens a device writer on
// it.
func sinkDevice(t testing.TB, ctx context.Context, size int64) (string, *volume.DeviceWriter) {
	t.Helper()
	dev := testimg.LoopDevice(t, t.TempDir(), size)
	tgt, err := volume.Open(context.Background(), volume.Options{Path: dev})
	require.NoError(t, err)
	t.Cleanup(func() { tgt.Close() })
	w, err := tgt.NewDeviceWriter(ctx, volume.DeviceWriterOptions{})
	require.NoError(t, err)
	return dev, w
}

// sinkImage is a guest image of size bytes: runs of random data, runs of
// zeros, and data clusters that are all zeros, cut into the requests a
// decoder would make (64 KiB clusters, some 512-byte sectors, zero runs
// of varied length) in guest order.
func sinkImage(seed uint64, size int64) ([]byte, []sinkReq) {
	rng := rand.New(rand.NewPCG(seed, 3))
	img := make([]byte, size)
	var reqs []sinkReq
	for off := int64(0); off < size; {
		var n int64
		switch rng.IntN(8) {
		case 0:
			n = 512 * int64(1+rng.IntN(16)) // sector-sized, often not block aligned
		case 1:
			n = 64 << 10 // a data cluster of zeros
			n = min(n, size-off)
			reqs = append(reqs, sinkReq{off: off, n: n})
			off += n
			continue
		default:
			n = 64 << 10
		}
		n = min(n, size-off)
		if rng.IntN(3) == 0 {
			reqs = append(reqs, sinkReq{off: off, n: n, zero: true})
		} else {
			for i := off; i < off+n; i += 8 {
				v := rng.Uint64() | 1
				for k := int64(0); k < 8 && i+k < off+n; k++ {
					img[i+k] = byte(v >> (8 * k))
				}
			}
			reqs = append(reqs, sinkReq{off: off, n: n})
		}
		off += n
	}
	return img, reqs
}

func playRequests(t *testing.T, s *volume.BatchedWriter, img []byte, reqs []sinkReq) {
	t.Helper()
	for _, r := range reqs {
		if r.zero {
			require.NoError(t, s.ZeroAt(r.off, r.n))
			continue
		}
		// The decoder's buffer is reused after the call: so is this one.
		p := bytes.Clone(img[r.off : r.off+r.n])
		n, err := s.WriteAt(p, r.off)
		require.NoError(t, err)
		require.EqualValues(t, r.n, n)
		clear(p)
	}
}

// playAndCompare plays reqs through s, flushes it, finishes w (the held
// head written across) and compares the whole device with img.
func playAndCompare(t *testing.T, ctx context.Context, s *volume.BatchedWriter, w *volume.DeviceWriter, dev string, img []byte, reqs []sinkReq) {
	t.Helper()
	playRequests(t, s, img, reqs)
	require.NoError(t, s.Flush())
	s.Close()
	require.NoError(t, w.Finish(ctx))
	requireSameBytes(t, img, readDev(t, dev, 0, int64(len(img))))
}

// sinkShapes: the production pool, and a tiny one whose buffers fill
// every few clusters, so extents are cut often and requests queue behind
// each other.
var sinkShapes = []struct {
	name                  string
	buf, buffers, writers int
}{
	{"4MiBx6", volume.DefaultBatchBuffer, volume.DefaultBatchBuffers, volume.DefaultBatchWriters},
	{"96KiBx3", 96 << 10, 3, 2},
}

// In guest order and shuffled, data, zero ranges and all-zero clusters
// through the stage reach the device byte for byte, the first MiB
// included (held by the DeviceWriter until Finish, written across).
func TestBatchedWriterWritesImage(t *testing.T) {
	const size = 24 * mib
	for _, shape := range sinkShapes {
		for _, order := range []string{"guest", "shuffled"} {
			t.Run(shape.name+"/"+order, func(t *testing.T) {
				ctx := context.Background()
				dev, w := sinkDevice(t, ctx, size)
				img, reqs := sinkImage(7, size)
				if order == "shuffled" {
					rand.New(rand.NewPCG(1, 2)).Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
				}
				s := volume.NewBatchedWriter(ctx, w, volume.BatchOptions{Zeroing: true, MayDeallocate: true, BufferSize: shape.buf, Buffers: shape.buffers, Writers: shape.writers})
				defer s.Close()
				playAndCompare(t, ctx, s, w, dev, img, reqs)
			})
		}
	}
}

// A vmdk zeroes the whole disk first and writes its grains over it: each
// grain must land after the zeroing, though both are in flight at once.
func TestBatchedWriterOrdersOverlappingRequests(t *testing.T) {
	const size = 64 * mib
	ctx := context.Background()
	dev, w := sinkDevice(t, ctx, size)
	img, reqs := sinkImage(11, size)
	// One-block buffers: each write is started at once, racing the
	// zeroing unless it waits.
	s := volume.NewBatchedWriter(ctx, w, volume.BatchOptions{Zeroing: true, BufferSize: 4096, Buffers: 8, Writers: 8})
	defer s.Close()
	require.NoError(t, s.ZeroAt(0, size))
	var data []sinkReq
	for _, r := range reqs {
		if !r.zero {
			data = append(data, r)
		}
	}
	// Far from the start first, where the zeroing reaches last.
	rand.New(rand.NewPCG(5, 5)).Shuffle(len(data), func(i, j int) { data[i], data[j] = data[j], data[i] })
	playAndCompare(t, ctx, s, w, dev, img, data)
}

// A write the device refuses (past its end) is gathered without error;
// Flush returns the failure, and so does every later call.
func TestBatchedWriterWriteFailureSurfaces(t *testing.T) {
	const size = 8 * mib
	ctx := context.Background()
	_, w := sinkDevice(t, ctx, size)
	s := volume.NewBatchedWriter(ctx, w, volume.BatchOptions{Zeroing: true, MayDeallocate: true})
	defer s.Close()
	p := bytes.Repeat([]byte{1}, 64<<10)
	for off := int64(size - 128<<10); off < size+128<<10; off += int64(len(p)) {
		_, err := s.WriteAt(p, off)
		require.NoError(t, err, "gathered, not yet written")
	}
	err := s.Flush()
	require.Error(t, err)
	assert.ErrorIs(t, err, unix.ENOSPC)
	_, err = s.WriteAt(p, 2*mib)
	assert.ErrorIs(t, err, unix.ENOSPC)
	assert.ErrorIs(t, s.ZeroAt(2*mib, 4096), unix.ENOSPC)
	assert.ErrorIs(t, s.Flush(), unix.ENOSPC)
}

// Once the context ends, calls fail with ErrCancelled and nothing more
// reaches the device; Close returns with no writer left.
func TestBatchedWriterCancelled(t *testing.T) {
	const size = 16 * mib
	ctx, cancel := context.WithCancel(context.Background())
	dev, w := sinkDevice(t, ctx, size)
	before := readDev(t, dev, 0, size)
	s := volume.NewBatchedWriter(ctx, w, volume.BatchOptions{Zeroing: true, MayDeallocate: true, BufferSize: 64 << 10, Buffers: 2, Writers: 2})
	p := bytes.Repeat([]byte{7}, 32<<10)
	_, err := s.WriteAt(p, 4*mib) // gathered only
	require.NoError(t, err)
	cancel()
	_, err = s.WriteAt(p, 4*mib+32<<10)
	assert.ErrorIs(t, err, errdefs.ErrCancelled)
	assert.ErrorIs(t, s.ZeroAt(8*mib, mib), errdefs.ErrCancelled)
	assert.ErrorIs(t, s.Flush(), errdefs.ErrCancelled)
	s.Close()
	s.Close()
	_, err = s.WriteAt(p, 0)
	assert.True(t, errors.Is(err, errdefs.ErrClosed) || errors.Is(err, errdefs.ErrCancelled), "%v", err)
	assert.True(t, bytes.Equal(before, readDev(t, dev, 0, size)), "nothing written after the cancel")
}

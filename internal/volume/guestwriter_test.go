//go:build linux

package volume_test

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/internal/volume"
)

// hasZeroAt says whether a decoder writing sink would tell it the ranges
// that must read as zeros (a streamdecode.ZeroSink).
func hasZeroAt(sink io.WriterAt) bool {
	_, ok := sink.(interface{ ZeroAt(off, n int64) error })
	return ok
}

// playGuest plays reqs through sink as a decoder would: data always, zero
// ranges only to a sink that takes them.
func playGuest(t *testing.T, sink io.WriterAt, img []byte, reqs []sinkReq) {
	t.Helper()
	zeroing, _ := sink.(interface{ ZeroAt(off, n int64) error })
	for _, r := range reqs {
		if r.zero {
			if zeroing != nil {
				require.NoError(t, zeroing.ZeroAt(r.off, r.n))
			}
			continue
		}
		n, err := sink.WriteAt(bytes.Clone(img[r.off:r.off+r.n]), r.off)
		require.NoError(t, err)
		require.EqualValues(t, r.n, n)
	}
}

// On a file target the guest writes land in the temporary file, which
// takes no zero ranges (new and sparse) and is cut to the disk's size by
// Finish; Written counts what was written.
func TestGuestWriterOntoAFile(t *testing.T) {
	const size = 12 * mib
	ctx := context.Background()
	tgt, err := volume.Open(ctx, volume.Options{Path: filepath.Join(t.TempDir(), "disk.img"), RequestedSize: 64 * mib})
	require.NoError(t, err)
	t.Cleanup(func() { tgt.Close() })
	g, err := tgt.NewGuestWriter(ctx, volume.GuestWriterOptions{})
	require.NoError(t, err)
	defer g.Close()
	assert.Nil(t, g.Device())
	img, reqs := sinkImage(11, size)
	require.False(t, hasZeroAt(g.Sink()), "a new sparse file needs no zero ranges")
	playGuest(t, g.Sink(), img, reqs)
	var data int64
	for _, r := range reqs {
		if !r.zero {
			data += r.n
		}
	}
	assert.Equal(t, data, g.Written())
	require.NoError(t, g.Flush())
	require.NoError(t, g.Finish(ctx, size))
	requireFileHolds(t, tgt.WritePath(), img)
	g.Close()
	g.Close()
}

// On a device that may hold old data (0xA5 everywhere) the sink takes
// zero ranges; the first MiB reads zeros until Finish writes the held
// head; then the device holds the disk byte for byte. On a zeroed device
// the sink takes no zero ranges.
func TestGuestWriterOntoADevice(t *testing.T) {
	const size = 24 * mib
	ctx := context.Background()
	dev := testimg.LoopDevice(t, t.TempDir(), size)
	tgt, err := volume.Open(ctx, volume.Options{Path: dev})
	require.NoError(t, err)
	t.Cleanup(func() { tgt.Close() })
	g, err := tgt.NewGuestWriter(ctx, volume.GuestWriterOptions{})
	require.NoError(t, err)
	defer g.Close()
	require.NotNil(t, g.Device())
	require.True(t, hasZeroAt(g.Sink()), "a device may hold old data")
	img, reqs := sinkImage(13, size)
	playGuest(t, g.Sink(), img, reqs)
	require.NoError(t, g.Flush())
	assert.Equal(t, make([]byte, mib), readDev(t, dev, 0, mib), "the head reached the device before Finish")
	assert.Positive(t, g.Written())
	require.NoError(t, g.Finish(ctx, size))
	g.Close()
	requireSameBytes(t, img, readDev(t, dev, 0, size))

	zeroed, err := tgt.NewGuestWriter(ctx, volume.GuestWriterOptions{TargetIsZero: true})
	require.NoError(t, err)
	defer zeroed.Close()
	assert.False(t, hasZeroAt(zeroed.Sink()), "a zeroed device needs no zero ranges")
}

//go:build linux

package volume_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

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
	require.NoError(t, g.Flush())
	assert.Equal(t, data, g.Written())
	require.NoError(t, g.Finish(ctx, size))
	requireFileHolds(t, tgt.WritePath(), img)
	g.Close()
	g.Close()
	assert.Equal(t, data, g.Written(), "progress reads Written after Close")
}

// On a file system that takes O_DIRECT, a decoder's whole blocks go around
// the page cache: once flushed, none of the file's pages is cached (the
// paced page-cache writer leaves all 16 MiB there).
func TestGuestWriterOntoAFileBypassesThePageCache(t *testing.T) {
	const size = 16 * mib
	ctx := context.Background()
	dir := t.TempDir()
	var fs unix.Statfs_t
	require.NoError(t, unix.Statfs(dir, &fs))
	if fs.Type == unix.TMPFS_MAGIC {
		t.Skip("SKIP: the temporary directory is tmpfs, whose files live in the page cache")
	}
	tgt, err := volume.Open(ctx, volume.Options{Path: filepath.Join(dir, "disk.img"), RequestedSize: size})
	require.NoError(t, err)
	t.Cleanup(func() { tgt.Close() })
	g, err := tgt.NewGuestWriter(ctx, volume.GuestWriterOptions{})
	require.NoError(t, err)
	defer g.Close()
	img := testimg.RandomBytes(size, 12)
	for off := int64(0); off < size; off += 64 << 10 {
		_, err := g.Sink().WriteAt(bytes.Clone(img[off:off+64<<10]), off)
		require.NoError(t, err)
	}
	require.NoError(t, g.Flush())
	require.NoError(t, g.Finish(ctx, size))
	f, err := os.Open(tgt.WritePath())
	require.NoError(t, err)
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	require.NoError(t, err)
	defer unix.Munmap(m)
	resident := make([]byte, size/os.Getpagesize())
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&resident[0])))
	require.Zero(t, errno, "mincore")
	cached := 0
	for _, r := range resident {
		cached += int(r & 1)
	}
	assert.Zero(t, cached, "pages of the file in the page cache")
	requireFileHolds(t, tgt.WritePath(), img)
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

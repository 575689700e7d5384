//go:build linux

package blockdev_test

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blockdev"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

func newLoop(t *testing.T, size int64, content byte) string {
	t.Helper()
	backing := filepath.Join(t.TempDir(), "backing.img")
	require.NoError(t, os.WriteFile(backing, bytes.Repeat([]byte{content}, int(size)), 0o600))
	return testimg.AttachLoop(t, backing, "--direct-io=on")
}

func TestIsBlockDevice(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o600))
	ok, err := blockdev.IsBlockDevice(file)
	require.NoError(t, err)
	assert.False(t, ok)
	ok, err = blockdev.IsBlockDevice("/dev/null") // a character device
	require.NoError(t, err)
	assert.False(t, ok)
	_, err = blockdev.IsBlockDevice(filepath.Join(t.TempDir(), "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)

	dev := newLoop(t, 3<<20, 0)
	ok, err = blockdev.IsBlockDevice(dev)
	require.NoError(t, err)
	assert.True(t, ok)
}

func TestSameDeviceUnderTwoNames(t *testing.T) {
	dev := newLoop(t, 1<<20, 0)
	devInfo, err := os.Stat(dev)
	require.NoError(t, err)
	other := filepath.Join(t.TempDir(), "other-name")
	require.NoError(t, unix.Mknod(other, unix.S_IFBLK|0o600, int(devInfo.Sys().(*syscall.Stat_t).Rdev)))
	otherInfo, err := os.Stat(other)
	require.NoError(t, err)
	assert.False(t, os.SameFile(devInfo, otherInfo), "two nodes")
	assert.True(t, blockdev.SameDevice(devInfo, otherInfo), "one device")

	null, err := os.Stat("/dev/null")
	require.NoError(t, err)
	zero, err := os.Stat("/dev/zero")
	require.NoError(t, err)
	assert.False(t, blockdev.SameDevice(null, zero))
	file := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o600))
	fileInfo, err := os.Stat(file)
	require.NoError(t, err)
	assert.False(t, blockdev.SameDevice(fileInfo, fileInfo), "a file is no device")
}

func TestSizeBlockSizeZeroOut(t *testing.T) {
	const size = 3 << 20
	dev := newLoop(t, size, 0xAB)
	f, err := blockdev.OpenExclusive(dev, os.O_RDWR)
	require.NoError(t, err)
	defer f.Close()
	n, err := blockdev.Size(f)
	require.NoError(t, err)
	assert.Equal(t, int64(size), n)
	lbs, err := blockdev.LogicalBlockSize(f)
	require.NoError(t, err)
	assert.Contains(t, []int{512, 1024, 2048, 4096}, lbs)

	require.NoError(t, blockdev.ZeroOut(f, 1<<20, 64<<10))
	require.NoError(t, unix.IoctlSetInt(int(f.Fd()), unix.BLKFLSBUF, 0))
	got := make([]byte, size)
	_, err = f.ReadAt(got, 0)
	require.NoError(t, err)
	want := bytes.Repeat([]byte{0xAB}, size)
	clear(want[1<<20 : 1<<20+64<<10])
	assert.True(t, bytes.Equal(want, got), "only the zeroed range reads zeros")

	err = blockdev.ZeroOut(f, 1, 512) // misaligned
	require.Error(t, err)
	assert.True(t, blockdev.IsUnsupported(err)) // EINVAL
	require.NoError(t, blockdev.ZeroOut(f, 0, 0))

	// On a regular file the ioctl is not there: the caller falls back.
	rf, err := os.CreateTemp(t.TempDir(), "plain")
	require.NoError(t, err)
	defer rf.Close()
	err = blockdev.ZeroOut(rf, 0, 4096)
	require.Error(t, err)
	assert.True(t, blockdev.IsUnsupported(err), "got %v", err)
	_, err = blockdev.Size(rf)
	require.Error(t, err)
}

func TestOpenExclusiveBusy(t *testing.T) {
	dev := newLoop(t, 1<<20, 0)
	holder, err := blockdev.OpenExclusive(dev, os.O_RDONLY)
	require.NoError(t, err)
	defer holder.Close()

	_, err = blockdev.OpenExclusive(dev, os.O_RDWR)
	require.ErrorIs(t, err, errdefs.ErrTargetBusy)
	assert.Contains(t, err.Error(), dev+" is in use (mounted or opened exclusively by another process)")

	// Plain opens still work while the claim is held.
	g, err := os.OpenFile(dev, os.O_RDWR, 0)
	require.NoError(t, err)
	g.Close()

	require.NoError(t, holder.Close())
	f, err := blockdev.OpenExclusive(dev, os.O_RDWR)
	require.NoError(t, err)
	f.Close()

	file := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err = blockdev.OpenExclusive(file, os.O_RDWR)
	require.ErrorIs(t, err, errdefs.ErrInvalidOptions)
}

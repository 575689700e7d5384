package volume_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/internal/volume"
)

// A scratch file goes through the page cache with paced writeback; its
// content and holes must be the same as a direct write's, across several
// writeback windows.
func TestScratchFileContentAndHoles(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	path := filepath.Join(dir, "scratch.qcow2")
	tg, err := volume.Open(ctx, volume.Options{Path: path, Scratch: true})
	require.NoError(t, err)
	defer tg.Close()
	img := makeImage(7, 200*mib+4321, 0.5) // > 3 writeback windows
	w := writeAll(t, tg, img)
	assert.Less(t, w.DataBytes(), int64(len(img))*3/4)
	require.NoError(t, tg.Commit(ctx))
	requireFileHolds(t, path, img)
	assert.Less(t, testimg.Allocated(t, path), int64(len(img))*3/4, "zero runs must stay holes")
}

func TestRefuseSameVolumeRefusesOneFileOrDeviceUnderTwoNames(t *testing.T) {
	dir := t.TempDir()
	a, b, link := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "link")
	require.NoError(t, os.WriteFile(a, []byte("a"), 0o600))
	require.NoError(t, os.WriteFile(b, []byte("a"), 0o600))
	require.NoError(t, os.Link(a, link))
	require.ErrorIs(t, volume.RefuseSameVolume(a, a), errdefs.ErrInvalidOptions)
	require.ErrorIs(t, volume.RefuseSameVolume(a, link), errdefs.ErrInvalidOptions)
	require.NoError(t, volume.RefuseSameVolume(a, b), "two files of the same bytes")
	require.NoError(t, volume.RefuseSameVolume(a, filepath.Join(dir, "none")), "no target yet")
	if os.Geteuid() != 0 {
		t.Skip("a second node of a loop device needs root")
	}
	loop := testimg.LoopDevice(t, dir, 1<<20)
	var st unix.Stat_t
	require.NoError(t, unix.Stat(loop, &st))
	alias := filepath.Join(dir, "alias")
	require.NoError(t, unix.Mknod(alias, unix.S_IFBLK|0o600, int(st.Rdev)))
	err := volume.RefuseSameVolume(loop, alias)
	require.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	assert.Contains(t, err.Error(), "same block device")
}

func TestOpenScratchMakesAScratchFileOrAsksForSpace(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tg, err := volume.OpenScratch(ctx, dir, "qcow2", nil)
	require.NoError(t, err)
	assert.Equal(t, dir, filepath.Dir(tg.Path()))
	assert.Equal(t, ".qcow2", filepath.Ext(tg.Path()))
	w, err := tg.NewWriter()
	require.NoError(t, err)
	img := testimg.RandomBytes(3*mib+17, 5)
	_, err = w.Write(img)
	require.NoError(t, err)
	_, err = w.Finish()
	require.NoError(t, err)
	require.NoError(t, tg.Commit(ctx))
	got, err := os.ReadFile(tg.Path())
	require.NoError(t, err)
	assert.Equal(t, img, got)

	_, err = volume.OpenScratch(ctx, filepath.Join(dir, "missing"), "raw", nil)
	require.ErrorIs(t, err, errdefs.ErrScratchSpaceRequired)
}

func TestQemuCacheModeIsDirectWhereTheTargetTakesIt(t *testing.T) {
	ctx := context.Background()
	open := func(path string) *volume.Target {
		tg, err := volume.Open(ctx, volume.Options{Path: path})
		require.NoError(t, err)
		t.Cleanup(func() { tg.Close() })
		return tg
	}
	file := open(filepath.Join(t.TempDir(), "disk.img"))
	assert.Equal(t, "writeback", file.QemuCacheMode("writeback"), "asked")
	assert.Equal(t, "none", file.QemuCacheMode("none"), "asked")
	if os.Geteuid() != 0 {
		t.Skip("a tmpfs and a loop device need root")
	}
	assert.Equal(t, "none", open(testimg.LoopDevice(t, t.TempDir(), 1<<20)).QemuCacheMode(""))
	// A tmpfs takes O_DIRECT from Linux 6.6 on: the mode follows what an
	// open of a file there says.
	fs := testimg.Tmpfs(t, 4<<20)
	want := "writeback"
	if fd, err := unix.Open(filepath.Join(fs, "probe"), unix.O_RDWR|unix.O_CREAT|unix.O_DIRECT, 0o600); err == nil {
		unix.Close(fd)
		want = "none"
	}
	onTmpfs := open(filepath.Join(fs, "disk.img"))
	assert.Equal(t, want, onTmpfs.QemuCacheMode(""))
	assert.Equal(t, want, onTmpfs.QemuCacheMode("trynone"))
}

package cloner_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// TestFilesystemToBlockDeltaPassLeavesTheDeviceDirectoryAlone: the storage
// migration of a VM disk from a filesystem class to a block one, a second
// time, with the delta pass asked for: the source volume holds disk.img,
// the target is a device (as /dev/cdi-block-volume in CDI's pod) holding
// an older copy with blocks changed since. A filesystem volume's pass
// lays out a directory and removes what its manifest does not list, so
// the server must not take one onto a device (it took the device's
// directory, /dev, for the volume and removed entries of it); the clone
// goes whole instead, and the device then holds disk.img byte for byte.
// The device node is made in a directory of the test's, beside a file
// that must stay.
func TestFilesystemToBlockDeltaPassLeavesTheDeviceDirectoryAlone(t *testing.T) {
	src := t.TempDir()
	img := testimg.Raw(t, src, "disk.img", deltaSize, 91)
	want := testimg.Digest(t, img, -1)
	loop := testimg.LoopDevice(t, t.TempDir(), deltaSize)
	testimg.WriteDevice(t, loop, img)
	f, err := os.OpenFile(loop, os.O_WRONLY, 0)
	require.NoError(t, err)
	for _, off := range blockStarts(8) {
		_, err := f.WriteAt(testimg.RandomBytes(4096, uint64(off)+1), off)
		require.NoError(t, err)
	}
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	require.NotEqual(t, want, testimg.Digest(t, loop, -1))

	devDir := t.TempDir()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(loop, &st))
	dev := filepath.Join(devDir, "cdi-block-volume")
	require.NoError(t, unix.Mknod(dev, unix.S_IFBLK|0o600, int(st.Rdev)))
	sentinel := filepath.Join(devDir, "termination-log")
	require.NoError(t, os.WriteFile(sentinel, []byte("kept"), 0o600))

	p := newPKI(t)
	s := startServer(t, p, importer.Options{Target: dev})
	res, err := sendTree(t, p, s.url(""), src, "", 0)
	require.NoError(t, err)
	assert.Nil(t, res.Delta, "no filesystem pass onto a device")
	got, err := s.wait(t)
	require.NoError(t, err)
	assert.Equal(t, res.Digest, got.ContentDigest)
	assert.Equal(t, want, testimg.Digest(t, loop, -1), "the device holds disk.img")
	b, err := os.ReadFile(sentinel)
	require.NoError(t, err, "the device's directory was emptied")
	assert.Equal(t, "kept", string(b))
}

//go:build linux

package volume_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/internal/volume"
)

// Write hands full chunks to goroutines of their own and returns (up to
// four behind): a chunk the file system then refuses (a tmpfs of 6 MiB, the target allowed to
// overcommit it) fails a later Write, WriteZeros and Finish with the
// file system's error, and the target is not committed.
func TestWriteFailureOfAChunkInFlightSurfacesLater(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	require.NoError(t, unix.Mount("tmpfs", dir, "tmpfs", 0, "size=6m"))
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	tg, err := volume.Open(ctx, volume.Options{Path: dir, RequestedSize: 64 * mib, AllowSparseOvercommit: true})
	require.NoError(t, err)
	defer tg.Close()
	w, err := tg.NewWriter(volume.WithContext(ctx))
	require.NoError(t, err)
	img := makeImage(11, 40*mib, 0) // more chunks than are in flight
	var failed error
	for off := 0; off < len(img) && failed == nil; off += 512 << 10 {
		_, failed = w.Write(img[off : off+512<<10])
	}
	require.Error(t, failed, "40 MiB of data do not fit a 6 MiB tmpfs")
	assert.ErrorIs(t, failed, unix.ENOSPC)
	assert.ErrorIs(t, w.WriteZeros(1*mib), unix.ENOSPC, "the error is sticky")
	_, err = w.Finish()
	assert.ErrorIs(t, err, unix.ENOSPC)
	assert.Error(t, tg.Commit(ctx), "a target whose writer failed is not committed")
	_, err = os.Stat(filepath.Join(dir, "disk.img"))
	assert.True(t, os.IsNotExist(err), "nothing was committed as disk.img")
}

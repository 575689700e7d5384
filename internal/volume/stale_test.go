//go:build linux

package volume_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testimg"
	"github.com/diskimport/engine/internal/volume"
)

// writeFull writes n non-zero bytes (allocated, not a hole) to dir/name.
func writeFull(t *testing.T, dir, name string, n int) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, bytes.Repeat([]byte{0x5A}, n), 0o644))
	return p
}

// TestOpenRemovesStaleTemporaryFiles: an import killed before Commit (a
// SIGKILL) leaves .disk.img.partial-NNN behind. The next Open removes it and
// counts its space as free; files of any other naming stay.
func TestOpenRemovesStaleTemporaryFiles(t *testing.T) {
	const mib = 1 << 20
	dir := testimg.Tmpfs(t, 16*mib)
	stale := writeFull(t, dir, ".disk.img.partial-2874551093", 10*mib)
	kept := []string{
		writeFull(t, dir, ".disk.img.partial-", 4096),         // no suffix: not CreateTemp's
		writeFull(t, dir, ".disk.img.partial-12x", 4096),      // not all digits
		writeFull(t, dir, ".other.img.partial-123", 4096),     // another target's
		writeFull(t, dir, "disk.img.partial-123", 4096),       // not hidden
		writeFull(t, dir, ".disk.img.partial-123.keep", 4096), // longer name
		writeFull(t, dir, "notes.txt", 4096),
	}
	require.NoError(t, os.Mkdir(filepath.Join(dir, ".disk.img.partial-99"), 0o755)) // a directory
	require.NoError(t, os.Symlink(kept[5], filepath.Join(dir, ".disk.img.partial-77")))

	tgt, err := volume.Open(context.Background(), volume.Options{Path: dir})
	require.NoError(t, err)
	t.Cleanup(func() { tgt.Close() })

	_, err = os.Stat(stale)
	assert.True(t, os.IsNotExist(err), "stale temporary file not removed")
	for _, p := range append(kept, filepath.Join(dir, ".disk.img.partial-99"), filepath.Join(dir, ".disk.img.partial-77")) {
		_, err := os.Lstat(p)
		assert.NoError(t, err, "%s must be kept", filepath.Base(p))
	}
	// The stale file's 10 MiB count as free: without the cleanup at most
	// 6 MiB would be.
	assert.Greater(t, tgt.Capacity(), int64(14*mib), "capacity %d", tgt.Capacity())

	// And they really are: 12 MiB fit on the 16 MiB filesystem.
	w, err := tgt.NewWriter()
	require.NoError(t, err)
	_, err = w.ReadFrom(bytes.NewReader(bytes.Repeat([]byte{0xC3}, 12*mib)))
	require.NoError(t, err)
	_, err = w.Finish()
	require.NoError(t, err)
	require.NoError(t, tgt.Commit(context.Background()))
}

// TestOpenKeepsTheTemporaryFileOfALiveImport: a second Open of the same
// target (another import running meanwhile) must not delete the first
// one's temporary file.
func TestOpenKeepsTheTemporaryFileOfALiveImport(t *testing.T) {
	dir := t.TempDir()
	first, err := volume.Open(context.Background(), volume.Options{Path: dir})
	require.NoError(t, err)
	t.Cleanup(func() { first.Close() })
	second, err := volume.Open(context.Background(), volume.Options{Path: dir})
	require.NoError(t, err)
	t.Cleanup(func() { second.Close() })
	_, err = os.Stat(first.WritePath())
	assert.NoError(t, err, "the live import's temporary file was removed")
	require.NoError(t, second.Close())
	require.NoError(t, first.Close())
	left, err := filepath.Glob(filepath.Join(dir, ".disk.img.partial-*"))
	require.NoError(t, err)
	assert.Empty(t, left)
}

package importer_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testimg"
)

// A sparse 64 MiB qcow2 holding 1 MiB of data, into an 8 MiB filesystem:
// refused before a byte is written by default, written whole (its data
// and holes) with AllowSparseOvercommit, as qemu-img convert writes it.
func TestImportSparseOvercommitIsAskedFor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounts a tmpfs: needs root")
	}
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := filepath.Join(dir, "disk.raw")
	data := testimg.Raw(t, dir, "data.raw", 1<<20, 7)
	b, err := os.ReadFile(data)
	require.NoError(t, err)
	f, err := os.Create(raw)
	require.NoError(t, err)
	_, err = f.WriteAt(b, 32<<20)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(64<<20))
	require.NoError(t, f.Close())
	src := testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2")

	small := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "overcommit-test", small).CombinedOutput()
	require.NoError(t, err, string(out))
	t.Cleanup(func() { _ = exec.Command("umount", small).Run() })
	target := filepath.Join(small, "disk.img")

	_, err = importer.Import(context.Background(), importer.Options{Source: src, Target: target, Logger: testLogger(t)})
	require.ErrorIs(t, err, importer.ErrTargetTooSmall)
	assert.NoFileExists(t, target)

	res, err := importer.Import(context.Background(), importer.Options{Source: src, Target: target, TargetOptions: importer.TargetOptions{AllowSparseOvercommit: true}, Logger: testLogger(t)})
	require.NoError(t, err)
	assert.EqualValues(t, 64<<20, res.VirtualSize)
	got, err := os.ReadFile(target)
	require.NoError(t, err)
	want, err := os.ReadFile(raw)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "the target differs from the image")
}

package importer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

func TestBlankRawFileWithOverhead(t *testing.T) {
	out := t.TempDir() // directory target: DIR/disk.img
	res, err := importer.CreateBlank(context.Background(), importer.BlankOptions{
		Target: out, Size: 64 << 20, FilesystemOverhead: 0.06, Logger: testimg.Logger(t),
	})
	require.NoError(t, err)
	path := filepath.Join(out, "disk.img")
	assert.True(t, res.Complete)
	assert.Equal(t, path, res.Target)
	assert.False(t, res.PreallocationApplied)
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.EqualValues(t, 60<<20, st.Size()) // 64 MiB / 1.06 rounded down to a MiB
	assert.EqualValues(t, 60<<20, res.VirtualSize)
	assert.Less(t, testimg.Allocated(t, path), int64(1<<20), "blank file must be sparse")
	testimg.AssertZeros(t, path, 0, 60<<20)
	entries, err := os.ReadDir(out)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left behind")
	assert.True(t, res.Complete)
}

func TestBlankRawFilePreallocated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk.img")
	res, err := importer.CreateBlank(context.Background(), importer.BlankOptions{
		Target: path, Size: 16 << 20, Preallocation: true, Logger: testimg.Logger(t),
	})
	require.NoError(t, err)
	assert.True(t, res.PreallocationApplied)
	assert.GreaterOrEqual(t, testimg.Allocated(t, path), int64(16<<20))
	testimg.AssertZeros(t, path, 0, 16<<20)
}

func TestBlankQCOW2File(t *testing.T) {
	testimg.Need(t, "qemu-img")
	path := filepath.Join(t.TempDir(), "disk.qcow2")
	res, err := importer.CreateBlank(context.Background(), importer.BlankOptions{
		Target: path, Size: 64 << 20, FilesystemOverhead: 0.06, Format: "qcow2", Logger: testimg.Logger(t),
	})
	require.NoError(t, err)
	assert.EqualValues(t, 60<<20, res.VirtualSize)
	out, err := exec.Command("qemu-img", "info", "-f", "qcow2", "--output=json", path).Output()
	require.NoError(t, err)
	var info struct {
		VirtualSize int64  `json:"virtual-size"`
		Format      string `json:"format"`
	}
	require.NoError(t, json.Unmarshal(out, &info))
	assert.Equal(t, "qcow2", info.Format)
	assert.EqualValues(t, 60<<20, info.VirtualSize)
	back := filepath.Join(t.TempDir(), "back.raw")
	testimg.Run(t, "qemu-img", "convert", "-f", "qcow2", "-O", "raw", path, back)
	testimg.AssertZeros(t, back, 0, 60<<20)
	assert.Less(t, testimg.Allocated(t, path), int64(1<<20))
}

func TestBlankFileOptionErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := importer.CreateBlank(context.Background(), importer.BlankOptions{Target: filepath.Join(dir, "a.img"), Logger: testimg.Logger(t)})
	require.ErrorIs(t, err, importer.ErrInvalidOptions, "a file needs a size")
	_, err = importer.CreateBlank(context.Background(), importer.BlankOptions{Target: filepath.Join(dir, "b.img"), Size: 1 << 20, Format: "vmdk", Logger: testimg.Logger(t)})
	require.ErrorIs(t, err, importer.ErrInvalidOptions)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing left behind")
}

func TestBlankBlockPreallocationZeroes(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "data.raw", 8<<20, 41)
	dev := testimg.LoopDevice(t, dir, 8<<20)
	testimg.WriteDevice(t, dev, raw) // the device holds data
	res, err := importer.CreateBlank(context.Background(), importer.BlankOptions{
		Target: dev, Size: 8 << 20, Preallocation: true, Logger: testimg.Logger(t),
	})
	require.NoError(t, err)
	assert.True(t, res.Complete)
	assert.True(t, res.PreallocationApplied)
	assert.EqualValues(t, 8<<20, res.VirtualSize)
	testimg.AssertZeros(t, dev, 0, 8<<20)
}

func TestBlankBlockWithoutPreallocationLeavesIt(t *testing.T) {
	dir := t.TempDir()
	dev := testimg.LoopDevice(t, dir, 4<<20)
	res, err := importer.CreateBlank(context.Background(), importer.BlankOptions{Target: dev, Logger: testimg.Logger(t)})
	require.NoError(t, err)
	assert.True(t, res.Complete)
	assert.False(t, res.PreallocationApplied)
	assert.Equal(t, bytes.Repeat([]byte{0xA5}, 4<<20), readPrefix(t, dev, 4<<20))

	// Too large a size, or qcow2, on a device: refused, device untouched.
	_, err = importer.CreateBlank(context.Background(), importer.BlankOptions{Target: dev, Size: 8 << 20, Preallocation: true, Logger: testimg.Logger(t)})
	require.ErrorIs(t, err, importer.ErrTargetTooSmall)
	_, err = importer.CreateBlank(context.Background(), importer.BlankOptions{Target: dev, Format: "qcow2", Preallocation: true, Logger: testimg.Logger(t)})
	require.ErrorIs(t, err, importer.ErrInvalidOptions)
	assert.Equal(t, bytes.Repeat([]byte{0xA5}, 4<<20), readPrefix(t, dev, 4<<20))
}

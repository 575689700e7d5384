package qemu

// These tests pin down qemu-img 7.2 behaviour the engine's design depends on
// (whether our own structural check of images is needed). They assert what
// qemu-img does today; if a qemu upgrade changes it, they fail loudly.

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/diskimport/engine/errdefs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fact 1: a qcow2 cut off in the middle (L2 tables and data clusters beyond
// end of file) is detected by check, but info and convert succeed silently
// and convert fills the missing part with zeros.
func TestFactTruncatedQcow2(t *testing.T) {
	requireTools(t)
	dir, _, q, data := makeQCOW2(t, "cut.qcow2")
	st, err := os.Stat(q)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(q, st.Size()/2))

	r := &Runner{}
	ctx := context.Background()
	_, err = r.Info(ctx, q, "qcow2")
	assert.NoError(t, err, "info does not notice the truncation")

	err = r.Check(ctx, q, "qcow2")
	require.ErrorIs(t, err, errdefs.ErrInvalidImage, "check detects the truncation")
	assert.Contains(t, err.Error(), "exceeding the end of the file")

	out := filepath.Join(dir, "cut.raw")
	_, err = r.Convert(ctx, q, out, ConvertOptions{SrcFormat: "qcow2", DstFormat: "raw"})
	require.NoError(t, err, "convert succeeds silently on a truncated qcow2")
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Len(t, got, len(data))
	assert.False(t, bytes.Equal(got, data), "the converted output silently differs from the original")
	// The lost tail (random data at the end of the disk) comes out as zeros.
	assert.Equal(t, make([]byte, 512<<10), got[len(got)-(512<<10):])
}

// Fact 2: info does not open a qcow2's external data file nor its backing
// file (Debian's 7.2.22 opens the image with no I/O and no backing), so info
// is safe for reading these names; check and convert do open them.
func TestFactInfoDoesNotOpenDataFileOrBacking(t *testing.T) {
	requireTools(t)
	dir := t.TempDir()
	r := &Runner{}
	ctx := context.Background()

	ext := filepath.Join(dir, "ext.raw")
	df := filepath.Join(dir, "df.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", "-o", "data_file="+ext+",data_file_raw=on", df, "1M")
	require.NoError(t, os.Remove(ext))
	info, err := r.Info(ctx, df, "qcow2")
	require.NoError(t, err, "info works although the data file is gone: it was never opened")
	assert.Equal(t, ext, info.DataFile)
	err = r.Check(ctx, df, "qcow2")
	require.Error(t, err, "check opens the data file")
	assert.Contains(t, err.Error(), "No such file or directory")

	base := filepath.Join(dir, "base.qcow2")
	top := filepath.Join(dir, "top.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", base, "1M")
	qemuImg(t, "create", "-q", "-f", "qcow2", "-b", base, "-F", "qcow2", top)
	require.NoError(t, os.Remove(base))
	info, err = r.Info(ctx, top, "qcow2")
	require.NoError(t, err, "info does not open the backing file")
	assert.Equal(t, base, info.BackingFilename)
	_, err = r.Convert(ctx, top, filepath.Join(dir, "o.raw"), ConvertOptions{SrcFormat: "qcow2", DstFormat: "raw"})
	require.Error(t, err, "convert opens the backing file")
}

// Fact 3: info DOES open vmdk extent files: a descriptor pointing at another
// file makes qemu-img info read it, so extents must be vetted before qemu-img
// info runs on an untrusted vmdk descriptor. The sandbox now denies that open
// (only the image itself is granted), so the fact is pinned unconfined.
func TestFactInfoOpensVmdkExtents(t *testing.T) {
	requireTools(t)
	dir := t.TempDir()
	d := filepath.Join(dir, "flat.vmdk")
	qemuImg(t, "create", "-q", "-f", "vmdk", "-o", "subformat=monolithicFlat", d, "1M")
	r := &Runner{unconfined: true}
	info, err := r.Info(context.Background(), d, "vmdk")
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(dir, "flat-flat.vmdk")}, info.ExtentFilenames)

	requireLandlock(t)
	_, err = (&Runner{}).Info(context.Background(), d, "vmdk")
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage, "the sandbox grants the descriptor, not its extent")
	assert.Contains(t, err.Error(), "flat-flat.vmdk")

	require.NoError(t, os.Remove(filepath.Join(dir, "flat-flat.vmdk")))
	_, err = r.Info(context.Background(), d, "vmdk")
	require.Error(t, err, "info opens the extent file")
	assert.Contains(t, err.Error(), "flat-flat.vmdk")
}

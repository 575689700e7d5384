package importer_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testimg"
)

// TestAsIsCopiesTheBytesUnchanged: content type as-is writes a stream's
// bytes as they are, whatever their first bytes look like (a qcow2 header,
// a gzip member) or their last sector (a fixed VHD footer stays), and a
// size given with the reader refuses a small target before writing.
func TestAsIsCopiesTheBytesUnchanged(t *testing.T) {
	testimg.Need(t, "qemu-img", "gzip")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 2<<20, 41)
	vhd := testimg.Convert(t, raw, filepath.Join(dir, "disk.vhd"), "vpc", "subformat=fixed")
	for _, src := range []string{testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2"), testimg.Compress(t, raw, "gz"), vhd} {
		data, err := os.ReadFile(src)
		require.NoError(t, err)
		dst := filepath.Join(t.TempDir(), "disk.img")
		res, err := importer.Import(context.Background(), importer.Options{
			Source: "-", SourceReader: bytes.NewReader(data), SourceReaderSize: int64(len(data)),
			Target: dst, TargetOptions: importer.TargetOptions{
				ContentType: importer.ContentTypeAsIs,
			}, Logger: testLogger(t),
		})
		require.NoError(t, err, src)
		assert.Equal(t, "raw", res.SourceFormat, src)
		assert.Empty(t, res.Compressions, src)
		assert.Equal(t, int64(len(data)), res.BytesWritten, src)
		assert.Equal(t, testimg.Digest(t, src, -1), testimg.Digest(t, dst, -1), "%s: not copied as it is", src)
	}

	dev := testimg.LoopDevice(t, t.TempDir(), 1<<20)
	before := testimg.Digest(t, dev, -1)
	data, err := os.ReadFile(raw)
	require.NoError(t, err)
	_, err = importer.Import(context.Background(), importer.Options{
		Source: "-", SourceReader: bytes.NewReader(data), SourceReaderSize: int64(len(data)),
		Target: dev, TargetOptions: importer.TargetOptions{
			ContentType: importer.ContentTypeAsIs,
		}, Logger: testLogger(t),
	})
	require.ErrorIs(t, err, errdefs.ErrTargetTooSmall)
	assert.Contains(t, err.Error(), "source size")
	assert.Equal(t, before, testimg.Digest(t, dev, -1), "the device was written")
}

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
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/internal/testkit/testtar"
)

func TestImportArchive(t *testing.T) {
	dir := t.TempDir()
	tree := testtar.Sample()
	tarPath := testtar.Write(t, dir, "tree.tar", tree)
	files := map[string]string{"tar": tarPath}
	for _, c := range []string{"gz", "xz", "zst"} {
		testimg.Need(t, map[string]string{"gz": "gzip", "xz": "xz", "zst": "zstd"}[c])
		files["tar."+c] = testimg.Compress(t, tarPath, c)
	}
	base := testimg.Serve(t, dir)
	forEachFileAndURL(t, files, base, func(t *testing.T, path, src string) {
		dest := t.TempDir()
		require.NoError(t, os.Mkdir(filepath.Join(dest, "lost+found"), 0o700))
		res, err := importer.Import(context.Background(), importer.Options{
			Source: src, Target: dest, TargetOptions: importer.TargetOptions{
				ContentType: importer.ContentTypeArchive,
			},
			Checksums: []string{testimg.FileDigest(t, path)},
			Logger:    testimg.Logger(t),
		})
		require.NoError(t, err)
		assert.True(t, res.Complete)
		assert.Equal(t, []importer.Phase{importer.PhaseInfo, importer.PhaseTransferDataDir, importer.PhaseCommit, importer.PhaseComplete}, res.Phases)
		assert.Equal(t, "tar", res.SourceFormat)
		assert.Len(t, res.Checksums, 1)
		fi, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, fi.Size(), res.BytesRead)
		testtar.Verify(t, dest, tree, "lost+found")
	})
}

func TestImportArchiveFailuresLeaveNothing(t *testing.T) {
	dir := t.TempDir()
	tarPath := testtar.Write(t, dir, "tree.tar", testtar.Sample())
	raw := testimg.Raw(t, dir, "disk.raw", 1<<20, 1)

	t.Run("checksum", func(t *testing.T) {
		dest := t.TempDir()
		_, err := importer.Import(context.Background(), importer.Options{
			Source: tarPath, Target: dest, TargetOptions: importer.TargetOptions{
				ContentType: importer.ContentTypeArchive,
			},
			Checksums: []string{"sha256:" + "00000000000000000000000000000000000000000000000000000000000000ff"},
			Logger:    testimg.Logger(t),
		})
		require.ErrorIs(t, err, errdefs.ErrChecksumMismatch)
		assertEmptyDir(t, dest)
	})
	t.Run("not-a-tar", func(t *testing.T) {
		dest := t.TempDir()
		_, err := importer.Import(context.Background(), importer.Options{
			Source: raw, Target: dest, TargetOptions: importer.TargetOptions{
				ContentType: importer.ContentTypeArchive,
			}, Logger: testimg.Logger(t)})
		require.ErrorIs(t, err, errdefs.ErrInvalidImage)
		assertEmptyDir(t, dest)
	})
	t.Run("target-not-dir", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file")
		require.NoError(t, os.WriteFile(f, []byte("keep"), 0o644))
		_, err := importer.Import(context.Background(), importer.Options{
			Source: tarPath, Target: f, TargetOptions: importer.TargetOptions{
				ContentType: importer.ContentTypeArchive,
			}, Logger: testimg.Logger(t)})
		require.ErrorIs(t, err, errdefs.ErrInvalidOptions)
		b, _ := os.ReadFile(f)
		assert.Equal(t, "keep", string(b))
	})
	t.Run("unknown-content-type", func(t *testing.T) {
		_, err := importer.Import(context.Background(), importer.Options{
			Source: tarPath, Target: t.TempDir(), TargetOptions: importer.TargetOptions{
				ContentType: "tarball",
			}, Logger: testimg.Logger(t)})
		require.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	})
	t.Run("truncated", func(t *testing.T) {
		b, err := os.ReadFile(tarPath)
		require.NoError(t, err)
		short := filepath.Join(t.TempDir(), "short.tar")
		require.NoError(t, os.WriteFile(short, b[:len(b)/2], 0o644))
		dest := t.TempDir()
		_, err = importer.Import(context.Background(), importer.Options{
			Source: short, Target: dest, TargetOptions: importer.TargetOptions{
				ContentType: importer.ContentTypeArchive,
			}, Logger: testimg.Logger(t)})
		require.ErrorIs(t, err, errdefs.ErrInvalidImage)
		assertEmptyDir(t, dest)
	})
}

func TestImportArchiveHostile(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	require.NoError(t, os.Mkdir(outside, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "keep"), []byte("keep"), 0o644))
	for name, ms := range testtar.Hostile(outside) {
		t.Run(name, func(t *testing.T) {
			p := testtar.Write(t, base, name+".tar", ms)
			gz := testimg.Compress(t, p, "gz")
			dest := filepath.Join(base, "dest-"+name)
			require.NoError(t, os.Mkdir(dest, 0o755))
			_, err := importer.Import(context.Background(), importer.Options{
				Source: gz, Target: dest, TargetOptions: importer.TargetOptions{
					ContentType: importer.ContentTypeArchive,
				}, Logger: testimg.Logger(t)})
			require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
			assertEmptyDir(t, dest)
			entries, err := os.ReadDir(outside)
			require.NoError(t, err)
			require.Len(t, entries, 1, "only keep is outside")
			b, _ := os.ReadFile(filepath.Join(outside, "keep"))
			assert.Equal(t, "keep", string(b))
			_, err = os.Lstat(filepath.Join(base, "escaped"))
			assert.True(t, os.IsNotExist(err))
		})
	}
}

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
			}, Logger: testimg.Logger(t),
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
		}, Logger: testimg.Logger(t),
	})
	require.ErrorIs(t, err, errdefs.ErrTargetTooSmall)
	assert.Contains(t, err.Error(), "source size")
	assert.Equal(t, before, testimg.Digest(t, dev, -1), "the device was written")
}

package importer_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/hostileimg"
	"github.com/diskimport/engine/internal/testimg"
)

// TestZstdClusterPastClusterSizeRefused: a qcow2 whose zstd-compressed
// cluster inflates 512 bytes past the cluster size is refused on every
// route, as qemu refuses to read it: decoded as a stream (compressed over
// HTTP, an upload) by the engine's decoder, and in place, over ranges or
// through scratch by qemu-img's conversion (an I/O error reading the
// cluster). The stream decoder took the first 64 KiB and completed.
func TestZstdClusterPastClusterSizeRefused(t *testing.T) {
	testimg.Need(t, "qemu-img", "zstd")
	const vsize = 2 << 20
	clusters := make([][]byte, vsize>>16)
	for i := range clusters {
		c := make([]byte, 64<<10)
		for k := range c {
			c[k] = byte(k%249 + i + 1)
		}
		clusters[i] = c
	}
	clusters[5] = append(clusters[5], make([]byte, 512)...)
	dir := t.TempDir()
	img := filepath.Join(dir, "long.qcow2")
	f, err := os.Create(img)
	require.NoError(t, err)
	_, err = hostileimg.QCOW2{VirtualSize: vsize, Clusters: clusters, Zstd: true}.WriteTo(f)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	zst := testimg.Compress(t, img, "zst")
	base := testimg.Serve(t, dir)
	for _, c := range []struct {
		name string
		o    importer.Options
		want error
	}{
		{"stream-decode", importer.Options{Source: base + filepath.Base(zst)}, importer.ErrInvalidImage},
		{"upload", importer.Options{Source: "-", SourceReader: pipeOf(t, img)}, importer.ErrInvalidImage},
		{"in-place", importer.Options{Source: img}, nil},
		{"ranged", importer.Options{Source: base + filepath.Base(img), TargetOptions: importer.TargetOptions{NoStreamDecode: true}}, nil},
		{"scratch", importer.Options{Source: base + filepath.Base(zst), TargetOptions: importer.TargetOptions{NoStreamDecode: true}}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := importFailsWith(t, c.o)
			assert.Equal(t, "InvalidImage", importer.Reason(err))
			if c.want != nil {
				assert.ErrorIs(t, err, c.want)
				assert.Contains(t, err.Error(), "inflates past")
				return
			}
			assert.ErrorIs(t, err, importer.ErrInvalidImage)
			assert.Contains(t, err.Error(), "Input/output error", "qemu-img's refusal")
		})
	}
}

// TestZstdClusterQemuImgCannotDecodeIsInvalidImage: a qcow2 that qemu-img
// wrote with zstd-compressed clusters (convert -c -o compression_type=zstd)
// and whose first zstd frame lost its magic is refused as InvalidImage on
// every route where qemu-img reads it (in place, over ranges, through
// scratch): qemu-img gives up with "error while reading at byte 65536:
// Input/output error", and nothing under it failed, so the image's data is
// what it could not decode (the reason was Failed).
func TestZstdClusterQemuImgCannotDecodeIsInvalidImage(t *testing.T) {
	testimg.Need(t, "qemu-img", "zstd")
	dir := t.TempDir()
	raw := testimg.Raw(t, t.TempDir(), "disk.raw", 2<<20, 61)
	img := filepath.Join(dir, "zstd.qcow2")
	testimg.Run(t, "qemu-img", "convert", "-q", "-c", "-f", "raw", "-O", "qcow2", "-o", "compression_type=zstd", raw, img)
	b, err := os.ReadFile(img)
	require.NoError(t, err)
	frame := bytes.Index(b, []byte{0x28, 0xb5, 0x2f, 0xfd}) // zstd's frame magic, little-endian
	require.Positive(t, frame, "qemu-img wrote zstd frames")
	copy(b[frame:], make([]byte, 4))
	require.NoError(t, os.WriteFile(img, b, 0o644))
	zst := testimg.Compress(t, img, "zst")
	base := testimg.Serve(t, dir)
	noStreamDecode := importer.TargetOptions{NoStreamDecode: true}
	for name, o := range map[string]importer.Options{
		"in-place": {Source: img},
		"ranged":   {Source: base + filepath.Base(img), TargetOptions: noStreamDecode},
		"scratch":  {Source: base + filepath.Base(zst), TargetOptions: noStreamDecode},
	} {
		t.Run(name, func(t *testing.T) {
			err := importFailsWith(t, o)
			assert.ErrorIs(t, err, importer.ErrInvalidImage)
			assert.Equal(t, "InvalidImage", importer.Reason(err))
			assert.Contains(t, err.Error(), "the image's data could not be decoded: qemu-img convert failed")
		})
	}
}

package importer_test

import (
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
			if c.want != nil {
				assert.ErrorIs(t, err, c.want)
				assert.Contains(t, err.Error(), "inflates past")
				return
			}
			assert.Contains(t, err.Error(), "Input/output error", "qemu-img's refusal")
		})
	}
}

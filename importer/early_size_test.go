package importer_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testimg"
)

// TestRawOneSectorTooLargeRefusedBeforeWriting: a raw image 512 bytes
// larger than the device could be a fixed VHD (its footer does not go to
// the disk), so the size alone does not decide. When the end can be read up
// front (a local file, or a server with ranges), the last sector decides
// before a byte is written: the device is left exactly as it was.
func TestRawOneSectorTooLargeRefusedBeforeWriting(t *testing.T) {
	const devSize = 8 << 20
	dir := t.TempDir()
	dev := testimg.LoopDevice(t, dir, devSize)
	www := filepath.Join(dir, "www")
	require.NoError(t, os.Mkdir(www, 0o755))
	// Each case its own content, so a case writing what an earlier one wrote
	// cannot go unnoticed.
	local := testimg.Raw(t, www, "local.raw", devSize+512, 41)
	testimg.Raw(t, www, "remote.raw", devSize+512, 43)
	base := testimg.Serve(t, www)

	for name, source := range map[string]string{"local file": local, "HTTP with ranges": base + "remote.raw"} {
		t.Run(name, func(t *testing.T) {
			before := testimg.Digest(t, dev, -1)
			_, err := importer.Import(context.Background(), importer.Options{
				Source: source, Target: dev, Logger: testLogger(t),
			})
			require.Error(t, err)
			assert.ErrorIs(t, err, importer.ErrTargetTooSmall)
			assert.Equal(t, before, testimg.Digest(t, dev, -1), "the device was written before the image was refused")
		})
	}

	// A fixed VHD of exactly the device's size is the same length and fits.
	t.Run("fixed VHD of the device's size", func(t *testing.T) {
		testimg.Need(t, "qemu-img")
		raw := testimg.Raw(t, dir, "disk.raw", devSize, 42)
		vhd := testimg.Convert(t, raw, filepath.Join(www, "fixed.vhd"), "vpc", "subformat=fixed", "force_size=on")
		st, err := os.Stat(vhd)
		require.NoError(t, err)
		require.EqualValues(t, devSize+512, st.Size())
		for _, source := range []string{vhd, base + "fixed.vhd"} {
			res, err := importer.Import(context.Background(), importer.Options{Source: source, Target: dev, Logger: testLogger(t)})
			require.NoError(t, err, source)
			assert.Equal(t, "vhd", res.SourceFormat)
			assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, dev, -1), source)
		}
	})
}

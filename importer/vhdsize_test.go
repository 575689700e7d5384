package importer_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// TestVHDAFewKiBTooBigNamesItsRounding: a VHD made for a 100 MiB disk is
// 8192 bytes more (qemu-img rounds its size up to a CHS geometry), so a
// 100 MiB volume refuses it; the refusal says why and how much more takes
// it, not only that a larger volume is required. A qcow2 short by as much
// gets no such words.
func TestVHDAFewKiBTooBigNamesItsRounding(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	vhd := filepath.Join(dir, "disk.vhd")
	testimg.Run(t, "qemu-img", "create", "-q", "-f", "vpc", vhd, "100M")
	qcow := filepath.Join(dir, "disk.qcow2")
	testimg.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", qcow, "104865792")
	for _, c := range []struct {
		src  string
		hint bool
	}{{vhd, true}, {qcow, false}} {
		_, err := importer.Import(context.Background(), importer.Options{Source: c.src, Target: filepath.Join(t.TempDir(), "disk.img"),
			TargetOptions: importer.TargetOptions{Size: 100 << 20}, Logger: testimg.Logger(t)})
		require.ErrorIs(t, err, importer.ErrTargetTooSmall, c.src)
		if c.hint {
			assert.Contains(t, err.Error(), "a VHD's size is rounded up to a disk geometry")
			assert.Contains(t, err.Error(), "8192 bytes more take it")
		} else {
			assert.NotContains(t, err.Error(), "VHD")
		}
	}
}

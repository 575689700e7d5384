package importer_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/qemu"
)

// TestImportWithoutQemuImg: with no qemu-img installed, a local qcow2
// (which qemu-img would convert in place) is decoded by the stream decoder
// and lands byte for byte; what needs qemu-img (a qcow2 target) fails with
// ErrToolMissing, reason ToolMissing, an install hint and no target left.
// Before, both failed as an "invalid image", reason InvalidImage.
func TestImportWithoutQemuImg(t *testing.T) {
	testimg.Need(t, "qemu-img") // to make the test image
	dir := t.TempDir()
	raw, qcow := testimg.RawAndQCOW2(t, dir, imageSize, 71)
	missing := &qemu.Runner{QemuImg: filepath.Join(dir, "no-such-qemu-img")}

	o := importer.Options{Source: qcow, Target: filepath.Join(t.TempDir(), "disk.img"), Qemu: missing, Logger: testimg.Logger(t)}
	res, err := importer.Import(context.Background(), o)
	require.NoError(t, err)
	expectImage(t, raw, o.Target, false)
	assert.NotContains(t, res.Phases, importer.PhaseConvert)

	o.Target = filepath.Join(t.TempDir(), "disk.qcow2")
	o.Format = "qcow2"
	_, err = importer.Import(context.Background(), o)
	require.ErrorIs(t, err, importer.ErrToolMissing)
	assert.NotErrorIs(t, err, importer.ErrInvalidImage)
	assert.Equal(t, "ToolMissing", importer.Reason(err))
	assert.Contains(t, err.Error(), "apt install qemu-utils")
	_, serr := os.Stat(o.Target)
	assert.True(t, os.IsNotExist(serr), "a failed import left its target")
}

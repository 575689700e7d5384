package importer_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// TestFailedImportSaysWhatItLeftOfTheTarget: a failed import's
// Result.TargetState says what is where the target lies, and it is true
// of the bytes there: nothing written (a text source refused in Info: the
// device's bytes are as they were), a partial file removed (a truncated
// raw.xz onto a file: no file at the path), a device written and its first
// MiB zeroed (the same onto a loop device: MiB 0 is zeros), and a delta
// pass cut after its writes (its first MiB zeroed). Before, a Result said
// none of it.
func TestFailedImportSaysWhatItLeftOfTheTarget(t *testing.T) {
	testimg.Need(t, "xz")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 8<<20, 81)
	xz, err := os.ReadFile(testimg.Compress(t, raw, "xz"))
	require.NoError(t, err)
	truncated := filepath.Join(dir, "cut.raw.xz")
	require.NoError(t, os.WriteFile(truncated, xz[:len(xz)*3/4], 0o600))
	text := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(text, bytes.Repeat([]byte("not a disk image\n"), 100), 0o600))
	importFails := func(o importer.Options) *importer.Result {
		t.Helper()
		o.Logger = testimg.Logger(t)
		res, err := importer.Import(context.Background(), o)
		require.Error(t, err)
		require.NotNil(t, res)
		assert.False(t, res.Complete)
		return res
	}

	t.Run("file, refused before a byte", func(t *testing.T) {
		target := filepath.Join(t.TempDir(), "disk.img")
		res := importFails(importer.Options{Source: text, Target: target})
		assert.Equal(t, importer.TargetUntouched, res.TargetState)
		assert.NoFileExists(t, target)
	})
	t.Run("file, cut mid-transfer", func(t *testing.T) {
		target := filepath.Join(t.TempDir(), "disk.img")
		res := importFails(importer.Options{Source: truncated, Target: target})
		assert.Equal(t, importer.TargetRemoved, res.TargetState)
		assert.NoFileExists(t, target)
		assert.Empty(t, testimg.DirNames(t, filepath.Dir(target)), "the partial copy was removed")
	})
	t.Run("device, refused before a byte", func(t *testing.T) {
		loop := testimg.LoopDevice(t, t.TempDir(), 16<<20)
		testimg.CopyOnto(t, raw, loop)
		res := importFails(importer.Options{Source: text, Target: loop})
		assert.Equal(t, importer.TargetUntouched, res.TargetState)
		assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, loop, 8<<20), "the device is as it was")
	})
	t.Run("device, cut mid-transfer", func(t *testing.T) {
		loop := testimg.LoopDevice(t, t.TempDir(), 16<<20)
		testimg.CopyOnto(t, raw, loop)
		res := importFails(importer.Options{Source: truncated, Target: loop})
		assert.Equal(t, importer.TargetWiped, res.TargetState)
		testimg.AssertZeros(t, loop, 0, 1<<20)
	})
	t.Run("delta pass, cut after its writes", func(t *testing.T) {
		const size = 8 << 20
		tg := testimg.Target{Path: filepath.Join(t.TempDir(), "disk.img")}
		src, base := deltaTargetOf(t, tg, size, 82)
		testimg.WriteRandomAt(t, src, 83, 4096, 0, 4<<20)
		o := importer.AfterPhase(importer.Options{Source: src, Target: tg.Path, Delta: true, DeltaBase: base},
			importer.PhaseTransferDelta, func(context.Context) error { return errors.New("cut after the writes") })
		res := importFails(o)
		assert.Equal(t, importer.TargetPartial, res.TargetState)
		testimg.AssertZeros(t, tg.Path, 0, 1<<20)
	})
}

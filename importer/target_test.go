package importer_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

func TestFileTargetGrowsToRequestedSize(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw, q := testimg.RawAndQCOW2(t, dir, 4<<20, 9)
	for _, src := range []string{raw, q} {
		out := t.TempDir() // a directory target: DIR/disk.img
		res, err := importer.Import(context.Background(), importer.Options{
			Source: src, Target: out, TargetOptions: importer.TargetOptions{
				Size:               64 << 20,
				FilesystemOverhead: 0.06,
			}, Logger: testimg.Logger(t),
		})
		require.NoError(t, err)
		target := filepath.Join(out, "disk.img")
		assert.Equal(t, target, res.Target)
		st, err := os.Stat(target)
		require.NoError(t, err)
		// CDI's rule: round down to 1 MiB of 64 MiB / 1.06 = 60 MiB.
		assert.EqualValues(t, 60<<20, st.Size())
		assert.EqualValues(t, 60<<20, res.TargetSize)
		assert.EqualValues(t, 4<<20, res.VirtualSize, "the image's size, not the grown file's")
		assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, target, 4<<20))
		testimg.AssertZeros(t, target, 4<<20, 56<<20)
		// Sparse: the grown part and the image's holes take no space.
		assert.Less(t, testimg.Allocated(t, target), int64(8<<20))
	}
}

func TestPreallocationAllocatesFile(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw, q := testimg.RawAndQCOW2(t, dir, 4<<20, 10)
	for _, src := range []string{raw, q} {
		target := filepath.Join(t.TempDir(), "disk.img")
		res, err := importer.Import(context.Background(), importer.Options{
			Source: src, Target: target, TargetOptions: importer.TargetOptions{
				Size:          16 << 20,
				Preallocation: true,
			}, Logger: testimg.Logger(t),
		})
		require.NoError(t, err)
		assert.True(t, res.PreallocationApplied)
		assert.GreaterOrEqual(t, testimg.Allocated(t, target), int64(16<<20))
		assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, target, 4<<20))
	}
}

func TestQCOW2FileTarget(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 4<<20, 11)
	vmdk := testimg.Convert(t, raw, filepath.Join(dir, "disk.vmdk"), "vmdk")
	rawxz := testimg.Compress(t, raw, "xz")
	for _, src := range []string{vmdk, rawxz} {
		target := filepath.Join(t.TempDir(), "disk.qcow2")
		res, err := importer.Import(context.Background(), importer.Options{
			Source: src, Target: target, TargetOptions: importer.TargetOptions{
				Format: "qcow2",
				Size:   32 << 20,
			}, Logger: testimg.Logger(t),
		})
		require.NoError(t, err)
		assert.EqualValues(t, 32<<20, res.TargetSize)
		assert.EqualValues(t, 4<<20, res.VirtualSize, "the image's size, not the resized qcow2's")
		back := filepath.Join(t.TempDir(), "back.raw")
		testimg.Run(t, "qemu-img", "convert", "-f", "qcow2", "-O", "raw", target, back)
		assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, back, 4<<20))
		st, err := os.Stat(back)
		require.NoError(t, err)
		assert.EqualValues(t, 32<<20, st.Size())
	}
}

func TestReplacesExistingFile(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 2<<20, 12)
	target := filepath.Join(t.TempDir(), "disk.img")
	require.NoError(t, os.WriteFile(target, make([]byte, 8<<20), 0o644))
	_, err := importer.Import(context.Background(), importer.Options{Source: raw, Target: target, Logger: testimg.Logger(t)})
	require.NoError(t, err)
	expectImage(t, raw, target, false)
}

func TestCancel(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 2<<20, 13)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	target := filepath.Join(t.TempDir(), "disk.img")
	res, err := importer.Import(ctx, importer.Options{Source: raw, Target: target, Logger: testimg.Logger(t)})
	require.Error(t, err)
	assert.ErrorIs(t, err, importer.ErrCancelled)
	assert.False(t, res.Complete)
	_, serr := os.Stat(target)
	assert.True(t, os.IsNotExist(serr))
}

// Zero runs of a streamed image reach a block device as deallocating
// zero-outs (thin storage and a loop device's backing file free them), not
// as written zeros.
func TestBlockZeroRunsAreDeallocated(t *testing.T) {
	testimg.Need(t, "zstd")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 8<<20, 14) // 2 of every 5 64 KiB blocks are zeros
	zst := testimg.Compress(t, raw, "zst")
	loop := testimg.LoopDevice(t, dir, 8<<20) // backing file fully written with 0xA5
	res, err := importer.Import(context.Background(), importer.Options{Source: zst, Target: loop, Logger: testimg.Logger(t)})
	require.NoError(t, err)
	expectImage(t, raw, loop, true)
	assert.EqualValues(t, 8<<20, res.BytesWritten)
	assert.Less(t, res.DataBytes, int64(6<<20), "zero runs counted as data")
	assert.Greater(t, res.DataBytes, int64(4<<20))
	out, err := exec.Command("losetup", "--noheadings", "-O", "BACK-FILE", loop).Output()
	require.NoError(t, err)
	assert.Less(t, testimg.Allocated(t, strings.TrimSpace(string(out))), int64(7<<20), "the zero runs stayed allocated")
}

// When an import fails after qemu-img wrote to a device, the device's first
// MiB is wiped so the half-written disk does not look bootable.
func TestFailedConvertWipesDeviceHead(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	_, q := testimg.RawAndQCOW2(t, dir, 4<<20, 15)
	loop := testimg.LoopDevice(t, dir, 8<<20)
	boom := errors.New("injected failure after convert")
	res, err := importer.Import(context.Background(), importer.AfterPhase(importer.Options{
		Source: q, Target: loop, Logger: testimg.Logger(t),
	}, importer.PhaseConvert, func(context.Context) error { return boom }))
	require.ErrorIs(t, err, boom)
	assert.False(t, res.Complete)
	testimg.AssertZeros(t, loop, 0, 1<<20)
}

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
				Source: source, Target: dev, Logger: testimg.Logger(t),
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
			res, err := importer.Import(context.Background(), importer.Options{Source: source, Target: dev, Logger: testimg.Logger(t)})
			require.NoError(t, err, source)
			assert.Equal(t, "vhd", res.SourceFormat)
			assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, dev, -1), source)
		}
	})
}

// A sparse 64 MiB qcow2 holding 1 MiB of data, into an 8 MiB filesystem:
// refused before a byte is written by default, written whole (its data
// and holes) with AllowSparseOvercommit, as qemu-img convert writes it.
func TestImportSparseOvercommitIsAskedFor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounts a tmpfs: needs root")
	}
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := filepath.Join(dir, "disk.raw")
	data := testimg.Raw(t, dir, "data.raw", 1<<20, 7)
	b, err := os.ReadFile(data)
	require.NoError(t, err)
	f, err := os.Create(raw)
	require.NoError(t, err)
	_, err = f.WriteAt(b, 32<<20)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(64<<20))
	require.NoError(t, f.Close())
	src := testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2")

	small := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "overcommit-test", small).CombinedOutput()
	require.NoError(t, err, string(out))
	t.Cleanup(func() { _ = exec.Command("umount", small).Run() })
	target := filepath.Join(small, "disk.img")

	_, err = importer.Import(context.Background(), importer.Options{Source: src, Target: target, Logger: testimg.Logger(t)})
	require.ErrorIs(t, err, importer.ErrTargetTooSmall)
	assert.NoFileExists(t, target)

	res, err := importer.Import(context.Background(), importer.Options{Source: src, Target: target, TargetOptions: importer.TargetOptions{AllowSparseOvercommit: true}, Logger: testimg.Logger(t)})
	require.NoError(t, err)
	assert.EqualValues(t, 64<<20, res.VirtualSize)
	got, err := os.ReadFile(target)
	require.NoError(t, err)
	want, err := os.ReadFile(raw)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "the target differs from the image")
}

// TestRetryAfterKillReclaimsPartialFile: an import SIGKILLed on a file
// volume leaves .disk.img.partial-NNN. Without reclaiming it the retry has
// no room (the volume is 16 MiB, the leftover 10 MiB, the image 8 MiB);
// with it the retry imports the image whole, and the volume's other files
// stay.
func TestRetryAfterKillReclaimsPartialFile(t *testing.T) {
	const mib = 1 << 20
	vol := testimg.Tmpfs(t, 16*mib)
	leftover := filepath.Join(vol, ".disk.img.partial-1804289383")
	require.NoError(t, os.WriteFile(leftover, bytes.Repeat([]byte{0xEE}, 10*mib), 0o660))
	unrelated := filepath.Join(vol, ".disk.img.partial-notours")
	require.NoError(t, os.WriteFile(unrelated, []byte("keep me"), 0o644))

	raw := testimg.Raw(t, t.TempDir(), "disk.raw", 8*mib, 51)
	res, err := importer.Import(context.Background(), importer.Options{Source: raw, Target: vol, Logger: testimg.Logger(t)})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(vol, "disk.img"), res.Target)
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, res.Target, -1))
	_, err = os.Stat(leftover)
	assert.True(t, os.IsNotExist(err), "the leftover partial file is still there")
	b, err := os.ReadFile(unrelated)
	require.NoError(t, err)
	assert.Equal(t, "keep me", string(b))
}

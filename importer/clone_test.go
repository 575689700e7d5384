package importer_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/blockdev"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// readPrefix returns the first n bytes of path.
func readPrefix(t *testing.T, path string, n int64) []byte {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, n)
	_, err = f.ReadAt(b, 0)
	require.NoError(t, err)
	return b
}

// sameBytes fails unless the first n bytes of a and b are identical.
func sameBytes(t *testing.T, a, b string, n int64) {
	t.Helper()
	require.True(t, bytes.Equal(readPrefix(t, a, n), readPrefix(t, b, n)), "%s and %s differ in their first %d bytes", a, b, n)
}

func TestCloneFileToFileVerifiedAndSparse(t *testing.T) {
	dir := t.TempDir()
	// 16 MiB, mostly zeros: 6 MiB of varied content, then 10 MiB of zeros
	// with the last bytes set.
	raw := testimg.Raw(t, dir, "src.raw", 6<<20, 31)
	require.NoError(t, os.Truncate(raw, 16<<20))
	f, err := os.OpenFile(raw, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("LAST-BYTES"), 16<<20-10)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	dest := filepath.Join(t.TempDir(), "clone.img")
	res, err := importer.Import(context.Background(), importer.Options{
		Source: raw, Target: dest, TargetOptions: importer.TargetOptions{
			ExactSize: true,
			Verify:    true,
		}, Logger: testimg.Logger(t),
	})
	require.NoError(t, err)
	assert.True(t, res.Complete)
	st, err := os.Stat(dest)
	require.NoError(t, err)
	assert.EqualValues(t, 16<<20, st.Size(), "exact size: the file is the source's size")
	sameBytes(t, raw, dest, 16<<20)

	want := "sha256:" + testimg.Digest(t, raw, -1)
	assert.True(t, res.Verified)
	assert.Equal(t, "sha256", res.VerifyMethod)
	assert.Equal(t, want, res.SourceDigest)
	assert.Equal(t, want, res.TargetDigest)
	m := res.JSONFields()
	assert.True(t, m.Verified)
	assert.Equal(t, want, m.SourceDigest)
	assert.Equal(t, want, m.TargetDigest)

	// Raw's zero 64 KiB blocks and the 10 MiB tail are holes.
	assert.Less(t, testimg.Allocated(t, dest), int64(6<<20), "clone should be sparse")
}

func TestCloneFileToBlock(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "src.raw", 6<<20, 32)
	dev := testimg.LoopDevice(t, dir, 8<<20)
	res, err := importer.Import(context.Background(), importer.Options{
		Source: raw, Target: dev, TargetOptions: importer.TargetOptions{
			Verify: true,
		}, Logger: testimg.Logger(t),
	})
	require.NoError(t, err)
	sameBytes(t, raw, dev, 6<<20)
	assert.True(t, res.Verified)
	assert.Equal(t, res.SourceDigest, res.TargetDigest)
	assert.Equal(t, "sha256:"+testimg.Digest(t, raw, -1), res.TargetDigest)
	// Past the image the device keeps its old content (0xA5).
	assert.Equal(t, bytes.Repeat([]byte{0xA5}, 2<<20), readPrefix(t, dev, 8<<20)[6<<20:])
}

func TestCloneBlockToFile(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "src.raw", 8<<20, 33)
	dev := testimg.LoopDevice(t, dir, 8<<20)
	testimg.WriteDevice(t, dev, raw)

	// The source device is held exclusively by someone else (as a mounted
	// filesystem would): a clone only reads it, so it still works.
	holder, err := blockdev.OpenExclusive(dev, unix.O_RDONLY)
	require.NoError(t, err)
	defer holder.Close()

	dest := filepath.Join(t.TempDir(), "clone.img")
	res, err := importer.Import(context.Background(), importer.Options{
		Source: dev, Target: dest, TargetOptions: importer.TargetOptions{
			ExactSize: true,
			Verify:    true,
		}, Logger: testimg.Logger(t),
	})
	require.NoError(t, err)
	st, err := os.Stat(dest)
	require.NoError(t, err)
	assert.EqualValues(t, 8<<20, st.Size())
	sameBytes(t, raw, dest, 8<<20)
	assert.True(t, res.Verified)
	assert.Equal(t, "sha256:"+testimg.Digest(t, raw, -1), res.SourceDigest)
	assert.Equal(t, res.SourceDigest, res.TargetDigest)
}

func TestCloneBlockToBlockExactZeroTarget(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "src.raw", 8<<20, 34)
	src := testimg.LoopDevice(t, dir, 8<<20)
	dst := testimg.LoopDevice(t, dir, 8<<20)
	testimg.WriteDevice(t, src, raw)

	// ZeroTarget: the destination (0xA5 everywhere) is zeroed first, then
	// the source's zero blocks are skipped; they must still read as zeros.
	res, err := importer.Import(context.Background(), importer.Options{
		Source: src, Target: dst, TargetOptions: importer.TargetOptions{
			ExactSize:  true,
			Verify:     true,
			ZeroTarget: true,
		}, Logger: testimg.Logger(t),
	})
	require.NoError(t, err)
	sameBytes(t, raw, dst, 8<<20)
	sameBytes(t, src, dst, 8<<20)
	assert.True(t, res.Verified)
	assert.Equal(t, res.SourceDigest, res.TargetDigest)
	assert.EqualValues(t, 8<<20, res.BytesWritten)
}

func TestCloneQCOW2FileToBlockConverted(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "src.raw", 4<<20, 35)
	q := testimg.Convert(t, raw, filepath.Join(dir, "src.qcow2"), "qcow2")
	dev := testimg.LoopDevice(t, dir, 8<<20)
	res, err := importer.Import(context.Background(), importer.Options{
		Source: q, Target: dev, TargetOptions: importer.TargetOptions{
			Verify: true,
		}, Logger: testimg.Logger(t),
	})
	require.NoError(t, err)
	assert.Equal(t, "qcow2", res.SourceFormat)
	assert.Contains(t, res.Phases, importer.PhaseConvert)
	sameBytes(t, raw, dev, 4<<20)
	// The device is larger than the image; compare looks at the image's
	// 4 MiB only (the old 0xA5 bytes past it are not part of the copy).
	assert.True(t, res.Verified)
	assert.Equal(t, "qemu-img compare", res.VerifyMethod)
	assert.Empty(t, res.SourceDigest)
	assert.Equal(t, "sha256:"+testimg.Digest(t, raw, -1), res.TargetDigest)

	// ExactSize with the 8 MiB device and the 4 MiB qcow2: refused.
	_, err = importer.Import(context.Background(), importer.Options{
		Source: q, Target: dev, TargetOptions: importer.TargetOptions{
			ExactSize: true,
		}, Logger: testimg.Logger(t),
	})
	require.ErrorIs(t, err, importer.ErrInvalidOptions)
}

func TestCloneQCOW2XZToFileVerified(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "src.raw", 4<<20, 36)
	q := testimg.Convert(t, raw, filepath.Join(dir, "src.qcow2"), "qcow2")
	qxz := testimg.Compress(t, q, "xz")
	dest := filepath.Join(t.TempDir(), "clone.img")
	scratch := t.TempDir()
	res, err := importer.Import(context.Background(), importer.Options{
		Source: qxz, Target: dest, TargetOptions: importer.TargetOptions{
			Verify:     true,
			ExactSize:  true,
			ScratchDir: scratch,
		}, Logger: testimg.Logger(t),
	})
	require.NoError(t, err)
	assert.True(t, res.ScratchUsed)
	assert.True(t, res.Verified)
	assert.Equal(t, "qemu-img compare", res.VerifyMethod)
	sameBytes(t, raw, dest, 4<<20)
	st, err := os.Stat(dest)
	require.NoError(t, err)
	assert.EqualValues(t, 4<<20, st.Size())
	left, err := os.ReadDir(scratch)
	require.NoError(t, err)
	assert.Empty(t, left, "the scratch copy kept for verification is removed afterwards")
}

func TestCloneExactSizeMismatchRefusedBeforeWriting(t *testing.T) {
	dir := t.TempDir()
	small := testimg.Raw(t, dir, "small.raw", 4<<20, 37)
	big := testimg.Raw(t, dir, "big.raw", 12<<20, 38)
	dev := testimg.LoopDevice(t, dir, 8<<20)
	pattern := bytes.Repeat([]byte{0xA5}, 1<<20)

	// Device larger than the source.
	res, err := importer.Import(context.Background(), importer.Options{
		Source: small, Target: dev, TargetOptions: importer.TargetOptions{
			ExactSize: true,
		}, Logger: testimg.Logger(t),
	})
	require.ErrorIs(t, err, importer.ErrInvalidOptions)
	assert.Contains(t, err.Error(), "exact size")
	assert.False(t, res.Complete)
	assert.Equal(t, pattern, readPrefix(t, dev, 1<<20), "device first MiB must be untouched")
	assert.Equal(t, bytes.Repeat([]byte{0xA5}, 8<<20), readPrefix(t, dev, 8<<20), "nothing written at all")

	// Device smaller than the source.
	_, err = importer.Import(context.Background(), importer.Options{
		Source: big, Target: dev, TargetOptions: importer.TargetOptions{
			ExactSize: true,
		}, Logger: testimg.Logger(t),
	})
	require.ErrorIs(t, err, importer.ErrTargetTooSmall)
	assert.Equal(t, bytes.Repeat([]byte{0xA5}, 8<<20), readPrefix(t, dev, 8<<20))

	// A file that Resize would grow past the source's size.
	dest := filepath.Join(t.TempDir(), "clone.img")
	_, err = importer.Import(context.Background(), importer.Options{
		Source: small, Target: dest, TargetOptions: importer.TargetOptions{
			ExactSize: true,
			Size:      64 << 20,
		}, Logger: testimg.Logger(t),
	})
	require.ErrorIs(t, err, importer.ErrInvalidOptions)
	_, serr := os.Stat(dest)
	assert.True(t, os.IsNotExist(serr), "no file left behind")
	entries, _ := os.ReadDir(filepath.Dir(dest))
	assert.Empty(t, entries, "no temporary file left behind")

	// Compressed raw: size unknown before writing.
	testimg.Need(t, "zstd")
	zst := testimg.Compress(t, small, "zst")
	_, err = importer.Import(context.Background(), importer.Options{
		Source: zst, Target: dev, TargetOptions: importer.TargetOptions{
			ExactSize: true,
		}, Logger: testimg.Logger(t),
	})
	require.ErrorIs(t, err, importer.ErrInvalidOptions)
	assert.Equal(t, bytes.Repeat([]byte{0xA5}, 8<<20), readPrefix(t, dev, 8<<20))
}

func TestCloneSameDeviceRefused(t *testing.T) {
	dir := t.TempDir()
	dev := testimg.LoopDevice(t, dir, 4<<20)
	_, err := importer.Import(context.Background(), importer.Options{
		Source: dev, Target: dev, TargetOptions: importer.TargetOptions{
			ZeroTarget: true,
		}, Logger: testimg.Logger(t),
	})
	require.ErrorIs(t, err, importer.ErrInvalidOptions)
	assert.Equal(t, bytes.Repeat([]byte{0xA5}, 4<<20), readPrefix(t, dev, 4<<20))
}

// A device that holds the source's bytes under another name (a loop device
// over the source file, a partition of one) is refused as the target, and a
// loop device's backing file as the target of a copy of it, before anything
// is written: the source is byte-identical afterwards.
func TestCloneOntoALoopDeviceOverTheSourceRefusedBeforeWriting(t *testing.T) {
	dir := t.TempDir()
	disk := testimg.Raw(t, dir, "disk.img", 8<<20, 41)
	want := testimg.Digest(t, disk, -1)
	loop := testimg.AttachLoop(t, disk, "-P")
	part := testimg.AddPartition(t, loop, 1, 2048, 8192) // [1 MiB, 5 MiB) of disk.img
	for _, c := range []struct {
		name, src, dst string
		o              importer.TargetOptions
	}{
		{"file onto its loop device", disk, loop, importer.TargetOptions{}},
		{"file onto its loop device zeroed first", disk, loop, importer.TargetOptions{ZeroTarget: true}},
		{"file onto a partition of its loop device", disk, part, importer.TargetOptions{}},
		{"loop device onto its backing file", loop, disk, importer.TargetOptions{}},
		{"partition onto its loop device", part, loop, importer.TargetOptions{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := importer.Import(context.Background(), importer.Options{
				Source: c.src, Target: c.dst, TargetOptions: c.o, Logger: testimg.Logger(t),
			})
			require.ErrorIs(t, err, importer.ErrInvalidOptions)
			assert.Contains(t, err.Error(), "source "+c.src+" and target "+c.dst+" hold the same bytes")
			assert.Equal(t, want, testimg.Digest(t, disk, -1), "the source's bytes are untouched")
		})
	}
	t.Run("delta pass from a loop device onto its backing file", func(t *testing.T) {
		_, err := importer.Import(context.Background(), importer.Options{
			Source: loop, Target: disk, Delta: true, Logger: testimg.Logger(t),
		})
		require.ErrorIs(t, err, importer.ErrInvalidOptions)
		assert.Contains(t, err.Error(), "hold the same bytes")
		assert.Equal(t, want, testimg.Digest(t, disk, -1))
	})
}

// A target that changes under the copy fails verification, and the import
// is not reported complete.
func TestCloneVerifyMismatchFails(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "src.raw", 4<<20, 39)
	dev := testimg.LoopDevice(t, dir, 4<<20)
	res, err := importer.Import(context.Background(), importer.WithPhaseHook(importer.Options{
		Source: raw, Target: dev, TargetOptions: importer.TargetOptions{
			Verify: true,
		}, Logger: testimg.Logger(t),
	}, corruptAfter(t, importer.PhaseTransferDataFile, dev, 2<<20, 'X')))
	require.ErrorIs(t, err, importer.ErrVerifyMismatch)
	assert.False(t, res.Complete)
	assert.False(t, res.Verified)
	assert.Equal(t, "sha256:"+testimg.Digest(t, raw, -1), res.SourceDigest)
	assert.NotEqual(t, res.SourceDigest, res.TargetDigest)
	assert.Contains(t, err.Error(), "verification failed")
}

func TestCloneVerifyNeedsLocalSource(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "src.raw", 1<<20, 40)
	data, err := os.ReadFile(raw)
	require.NoError(t, err)
	_, err = importer.Import(context.Background(), importer.Options{
		Source: "-", SourceReader: bytes.NewReader(data), Target: filepath.Join(t.TempDir(), "x.img"), TargetOptions: importer.TargetOptions{
			Verify: true,
		}, Logger: testimg.Logger(t),
	})
	require.ErrorIs(t, err, importer.ErrInvalidOptions)
}

// A converted image whose target changes after qemu-img wrote it fails
// qemu-img compare.
func TestCloneVerifyCompareMismatchFails(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "src.raw", 4<<20, 42)
	q := testimg.Convert(t, raw, filepath.Join(dir, "src.qcow2"), "qcow2")
	dev := testimg.LoopDevice(t, dir, 4<<20)
	res, err := importer.Import(context.Background(), importer.WithPhaseHook(importer.Options{
		Source: q, Target: dev, TargetOptions: importer.TargetOptions{
			Verify: true,
		}, Logger: testimg.Logger(t),
	}, corruptAfter(t, importer.PhaseConvert, dev, 1<<20, 'Y')))
	require.ErrorIs(t, err, importer.ErrVerifyMismatch)
	assert.Contains(t, err.Error(), "qemu-img compare")
	assert.False(t, res.Complete)
	assert.False(t, res.Verified)
}

// corruptAfter wraps phase so that, once it succeeded, 4 KiB at off of dev
// are overwritten with fill behind the importer's back.
func corruptAfter(t *testing.T, phase importer.Phase, dev string, off int64, fill byte) func(importer.Phase, func(context.Context) error) func(context.Context) error {
	return func(p importer.Phase, step func(context.Context) error) func(context.Context) error {
		if p != phase {
			return step
		}
		return func(ctx context.Context) error {
			err := step(ctx)
			if err == nil {
				f, oerr := os.OpenFile(dev, os.O_WRONLY|os.O_SYNC, 0)
				require.NoError(t, oerr)
				_, werr := f.WriteAt(bytes.Repeat([]byte{fill}, 4096), off)
				require.NoError(t, werr)
				require.NoError(t, f.Close())
			}
			return err
		}
	}
}

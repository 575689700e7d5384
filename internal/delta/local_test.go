package delta_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/delta"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

const volSize = 24 << 20

// changedCopy makes a source and a copy of it, then changes the source
// at offsets: it returns the paths and how many blocks changed.
func changedCopy(t *testing.T, seed uint64) (src, dst string, changed int64) {
	dir := t.TempDir()
	src = testimg.Raw(t, dir, "src.raw", volSize, seed)
	dst = filepath.Join(dir, "dst.raw")
	testimg.CopyOnto(t, src, dst)
	return src, dst, testimg.WriteRandomAt(t, src, seed*10, 4096, offsets...)
}

var offsets = []int64{0, 70 << 10, 3 << 20, 3<<20 + 8192, 5<<20 + 100, 9 << 20, 11<<20 + 61<<10, 17 << 20, volSize - 4096}

func TestLocalPassSendsOnlyTheChangedBlocks(t *testing.T) {
	ctx := context.Background()
	src, dst, changed := changedCopy(t, 1)

	p, err := delta.Local(ctx, src, dst, delta.LocalOptions{Logger: slog.Default()})
	require.NoError(t, err)
	assert.Equal(t, changed, p.BlocksChanged)
	assert.LessOrEqual(t, p.DataBytes+p.ZeroBytes, changed*delta.BlockSize)
	assert.True(t, p.Final, "nothing wrote the source during the pass")
	assert.Equal(t, testimg.Digest(t, src, -1), testimg.Digest(t, dst, -1))
	assert.Equal(t, testimg.ContentDigest(t, src), p.Digest)

	// The next pass, of an unchanged source, names the last one's digest
	// as its base and sends nothing.
	again, err := delta.Local(ctx, src, dst, delta.LocalOptions{Base: p.Digest, Logger: slog.Default()})
	require.NoError(t, err)
	assert.Zero(t, again.BlocksChanged)
	assert.True(t, again.Final)
	assert.Equal(t, p.Digest, again.BaseDigest)
}

func TestLocalPassBetweenLoopDevices(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	srcFile := testimg.Raw(t, dir, "src.raw", volSize, 2)
	dstFile := filepath.Join(dir, "dst.raw")
	testimg.CopyOnto(t, srcFile, dstFile)
	src, dst := testimg.AttachLoop(t, srcFile), testimg.AttachLoop(t, dstFile)
	changed := testimg.WriteRandomAt(t, src, 20, 4096, offsets...)
	// A data block become zeros, sent as a zero run.
	f, err := os.OpenFile(src, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(make([]byte, delta.BlockSize), 13*delta.BlockSize)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	changed++

	p, err := delta.Local(ctx, src, dst, delta.LocalOptions{Logger: slog.Default()})
	require.NoError(t, err)
	assert.Equal(t, changed, p.BlocksChanged)
	assert.Equal(t, int64(delta.BlockSize), p.ZeroBytes)
	assert.True(t, p.Final)
	assert.Equal(t, testimg.Digest(t, src, -1), testimg.Digest(t, dst, -1))
}

// failingSink is a Target that fails after n runs: a pass cut off.
type failingSink struct {
	*delta.Target
	n int
}

var errCut = errors.New("cut off")

func (s *failingSink) Data(off int64, p []byte) error {
	if s.n--; s.n < 0 {
		return errCut
	}
	return s.Target.Data(off, p)
}

func TestCutPassLeavesNoCopyAndTheNextPassIsExact(t *testing.T) {
	ctx := context.Background()
	src, dst, _ := changedCopy(t, 3)

	sf, size, err := delta.OpenSource(src)
	require.NoError(t, err)
	defer sf.Close()
	tgt, err := delta.OpenTarget(dst, size)
	require.NoError(t, err)
	base, err := tgt.Sign(ctx)
	require.NoError(t, err)
	sig, err := delta.Sign(ctx, sf, size)
	require.NoError(t, err)
	_, err = delta.Send(ctx, sf, sig, delta.Changes(sig, base), 0, &failingSink{tgt, 3})
	require.ErrorIs(t, err, errCut)
	require.NoError(t, tgt.Close())
	// Both ends zeroed: no partition table, no boot sector, no digest of
	// any copy.
	testimg.AssertZeros(t, dst, 0, 1<<20)
	testimg.AssertZeros(t, dst, volSize-1<<20, 1<<20)
	assert.NotEqual(t, base.Digest.String(), testimg.ContentDigest(t, dst))

	_, err = delta.Local(ctx, src, dst, delta.LocalOptions{Base: base.Digest.String(), Logger: slog.Default()})
	require.ErrorIs(t, err, errdefs.ErrNoDeltaBase, "the cut target is not the base it was")
	p, err := delta.Local(ctx, src, dst, delta.LocalOptions{Logger: slog.Default()})
	require.NoError(t, err)
	assert.True(t, p.Final)
	assert.Equal(t, testimg.Digest(t, src, -1), testimg.Digest(t, dst, -1))
}

func TestTargetThatIsNoBaseIsRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "src.raw", volSize, 4)
	other := testimg.Raw(t, dir, "other.raw", volSize+1<<20, 4)
	_, err := delta.Local(ctx, src, other, delta.LocalOptions{Logger: slog.Default()})
	require.ErrorIs(t, err, errdefs.ErrNoDeltaBase)
	_, err = delta.Local(ctx, src, filepath.Join(dir, "none.raw"), delta.LocalOptions{Logger: slog.Default()})
	require.ErrorIs(t, err, errdefs.ErrNoDeltaBase)
	_, err = delta.Local(ctx, src, src, delta.LocalOptions{Logger: slog.Default()})
	require.ErrorIs(t, err, errdefs.ErrInvalidOptions)

	dst := filepath.Join(dir, "dst.raw")
	testimg.CopyOnto(t, src, dst)
	before := testimg.Digest(t, dst, -1)
	_, err = delta.Local(ctx, src, dst, delta.LocalOptions{Base: testimg.ContentDigest(t, other)})
	require.ErrorIs(t, err, errdefs.ErrNoDeltaBase)
	assert.Equal(t, before, testimg.Digest(t, dst, -1), "a refused base is not written")
}

func TestConcurrentWriterMakesAWarmPass(t *testing.T) {
	ctx := context.Background()
	src, dst, _ := changedCopy(t, 5)

	stop := testimg.KeepWriting(t, src, volSize)
	p, err := delta.Local(ctx, src, dst, delta.LocalOptions{Logger: slog.Default()})
	stop()
	require.NoError(t, err)
	assert.False(t, p.Final, "a pass of a source being written is never final")
	assert.Equal(t, p.Digest, testimg.ContentDigest(t, dst), "the target is the source as sent")

	final, err := delta.Local(ctx, src, dst, delta.LocalOptions{Base: p.Digest, Logger: slog.Default()})
	require.NoError(t, err)
	assert.True(t, final.Final)
	assert.Equal(t, testimg.Digest(t, src, -1), testimg.Digest(t, dst, -1))
}

func TestRecheckOfAQuietFileTrustsItsStampAndSeesAWrite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := testimg.Raw(t, dir, "src.raw", 1<<20, 7)
	time.Sleep(60 * time.Millisecond) // quiet for longer than a stamp needs
	for _, write := range []bool{false, true} {
		f, size, err := delta.OpenSource(path)
		require.NoError(t, err)
		stamp := delta.StampSource(f)
		require.True(t, stamp.Trusted(), "a file quiet for 60 ms")
		sig, err := delta.Sign(ctx, f, size)
		require.NoError(t, err)
		if write {
			testimg.WriteRandomAt(t, path, 9, 512, 4096)
		}
		unchanged, stop := delta.Recheck(ctx, f, sig, stamp)
		same, err := unchanged()
		stop()
		require.NoError(t, err)
		assert.Equal(t, !write, same, "written: %v", write)
		require.NoError(t, f.Close())
		time.Sleep(60 * time.Millisecond)
	}
	// A device has no stamp: its passes read it again.
	if os.Geteuid() == 0 {
		loop := testimg.AttachLoop(t, path)
		f, _, err := delta.OpenSource(loop)
		require.NoError(t, err)
		defer f.Close()
		assert.False(t, delta.StampSource(f).Trusted())
	}
}

package delta_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/delta"
	"github.com/diskimport/engine/internal/testimg"
)

const volSize = 24 << 20

// copyFile copies src to dst whole (a target holding the previous pass).
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE, 0o644)
	require.NoError(t, err)
	defer out.Close()
	_, err = io.Copy(out, in)
	require.NoError(t, err)
}

// scribble writes 4 KiB of random bytes at each offset of path, in place,
// and returns how many distinct blocks that changed.
func scribble(t *testing.T, path string, seed uint64, offsets ...int64) int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	blocks := map[int64]bool{}
	for i, off := range offsets {
		_, err := f.WriteAt(testimg.RandomBytes(4096, seed+uint64(i)), off)
		require.NoError(t, err)
		blocks[off/delta.BlockSize], blocks[(off+4095)/delta.BlockSize] = true, true
	}
	require.NoError(t, f.Sync())
	return int64(len(blocks))
}

func contentDigest(t *testing.T, path string) string {
	t.Helper()
	f, size, err := delta.OpenSource(path)
	require.NoError(t, err)
	defer f.Close()
	d, err := blkhash.SumFile(context.Background(), f, size, 0)
	require.NoError(t, err)
	return d.String()
}

// changedCopy makes a source and a copy of it, then changes the source
// at offsets: it returns the paths and how many blocks changed.
func changedCopy(t *testing.T, seed uint64) (src, dst string, changed int64) {
	dir := t.TempDir()
	src = testimg.Raw(t, dir, "src.raw", volSize, seed)
	dst = filepath.Join(dir, "dst.raw")
	copyFile(t, src, dst)
	return src, dst, scribble(t, src, seed*10, offsets...)
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
	assert.Equal(t, contentDigest(t, src), p.Digest)

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
	copyFile(t, srcFile, dstFile)
	src, dst := testimg.AttachLoop(t, srcFile), testimg.AttachLoop(t, dstFile)
	changed := scribble(t, src, 20, offsets...)
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
	assert.NotEqual(t, base.Digest.String(), contentDigest(t, dst))

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
	copyFile(t, src, dst)
	before := testimg.Digest(t, dst, -1)
	_, err = delta.Local(ctx, src, dst, delta.LocalOptions{Base: contentDigest(t, other)})
	require.ErrorIs(t, err, errdefs.ErrNoDeltaBase)
	assert.Equal(t, before, testimg.Digest(t, dst, -1), "a refused base is not written")
}

func TestConcurrentWriterMakesAWarmPass(t *testing.T) {
	ctx := context.Background()
	src, dst, _ := changedCopy(t, 5)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		f, err := os.OpenFile(src, os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		for i := uint64(0); ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			off := int64(i*7919%uint64(volSize/4096)) * 4096
			if _, err := f.WriteAt(testimg.RandomBytes(4096, 1000+i), off); err != nil {
				t.Error(err)
				return
			}
		}
	})
	p, err := delta.Local(ctx, src, dst, delta.LocalOptions{Logger: slog.Default()})
	close(stop)
	wg.Wait()
	require.NoError(t, err)
	assert.False(t, p.Final, "a pass of a source being written is never final")
	assert.Equal(t, p.Digest, contentDigest(t, dst), "the target is the source as sent")

	final, err := delta.Local(ctx, src, dst, delta.LocalOptions{Base: p.Digest, Logger: slog.Default()})
	require.NoError(t, err)
	assert.True(t, final.Final)
	assert.Equal(t, testimg.Digest(t, src, -1), testimg.Digest(t, dst, -1))
}

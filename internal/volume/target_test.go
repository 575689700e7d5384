//go:build linux

package volume_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/blockdev"
	"github.com/diskimport/engine/internal/iostage"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/internal/volume"
)

func TestUsableSize(t *testing.T) {
	const gi = 1 << 30
	cases := []struct {
		size     int64
		overhead float64
		want     int64
	}{
		{mib, 0, mib},
		{40 * mib, 0, 40 * mib},
		{gi, 0, gi},
		{40 * gi, 0, 40 * gi},
		{mib, 0.06, 0}, // 989,647 bytes rounds down to 0 MiB
		{40 * mib, 0.06, 37 * mib},
		{gi, 0.06, 966 * mib},
		{40 * gi, 0.06, 38641 * mib},
		{mib, 0.75, 0},
		{40 * mib, 0.75, 22 * mib},
		{gi, 0.75, 585 * mib},
		{40 * gi, 0.75, 23405 * mib},
		{mib + 1, 0, mib},
		{0, 0.06, 0},
		{-5, 0, 0},
		{10 * mib, -1, 10 * mib},
	}
	for _, c := range cases {
		got := volume.UsableSize(c.size, c.overhead)
		assert.Equal(t, c.want, got, "UsableSize(%d, %v)", c.size, c.overhead)
		assert.LessOrEqual(t, got, max(c.size, 0))
		assert.Zero(t, got%mib)
	}
}

// writeAll streams img through Writer.ReadFrom (via io.Copy) and finishes.
func writeAll(t *testing.T, tg *volume.Target, img []byte, opts ...volume.WriterOption) *volume.Writer {
	t.Helper()
	w, err := tg.NewWriter(opts...)
	require.NoError(t, err)
	n, err := io.Copy(w, onlyReader{bytes.NewReader(img)})
	require.NoError(t, err)
	require.Equal(t, int64(len(img)), n)
	total, err := w.Finish()
	require.NoError(t, err)
	require.Equal(t, int64(len(img)), total)
	require.Equal(t, int64(len(img)), w.Written())
	return w
}

func TestFileTargetDirectoryMostlyZeroSparse(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	tg, err := volume.Open(ctx, volume.Options{Path: dir})
	require.NoError(t, err)
	defer tg.Close()
	final := filepath.Join(dir, "disk.img")
	assert.Equal(t, volume.File, tg.Kind())
	assert.Equal(t, final, tg.Path())
	assert.Equal(t, dir, filepath.Dir(tg.WritePath()))
	assert.Contains(t, filepath.Base(tg.WritePath()), ".disk.img.partial-")
	assert.Greater(t, tg.Capacity(), int64(64*mib))

	// 64 MiB + odd tail, mostly zeros: data only at the start, middle and end.
	img := make([]byte, 64*mib+1000)
	copy(img, makeImage(1, 3*mib, 0.3))
	copy(img[30*mib+12345:], makeImage(2, 2*mib, 0.3))
	copy(img[len(img)-100:], []byte("end of the disk"))
	w := writeAll(t, tg, img)
	assert.Less(t, w.DataBytes(), int64(6*mib))
	_, err = os.Stat(final)
	require.ErrorIs(t, err, os.ErrNotExist, "final path must not appear before Commit")
	require.NoError(t, tg.Commit(ctx))

	requireFileHolds(t, final, img)
	assert.Less(t, testimg.Allocated(t, final), int64(len(img))/8, "file must stay sparse")
	fi, err := os.Stat(final)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o660), fi.Mode().Perm())
	_, err = os.Stat(tg.WritePath())
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestFileTargetWritePathsAgree(t *testing.T) {
	// The io.Writer path with odd write sizes, mixed with ReadFrom, must give
	// the same bytes as a single ReadFrom, and the content hash fed beside
	// the writes the digest of those bytes.
	img := makeImage(3, 13*mib+4097, 0.3)
	dir := t.TempDir()
	ctx := context.Background()
	tg, err := volume.Open(ctx, volume.Options{Path: filepath.Join(dir, "x.raw")})
	require.NoError(t, err)
	defer tg.Close()
	content := blkhash.New(2)
	w, err := tg.NewWriter(volume.WithContext(ctx), volume.WithContentHash(content))
	require.NoError(t, err)
	// Progress is readable from another goroutine while writing (-race).
	stopPoll := make(chan struct{})
	polled := make(chan int64)
	go func() {
		var last int64
		for {
			select {
			case <-stopPoll:
				polled <- last
				return
			default:
				n := w.Written()
				if n < last {
					panic("Written went backwards")
				}
				last = n
				_ = w.DataBytes()
			}
		}
	}()
	defer func() { close(stopPoll); <-polled }()
	off := 0
	for _, n := range []int{1, 511, 10007, 3*mib + 17, 65536} {
		k, err := w.Write(img[off : off+n])
		require.NoError(t, err)
		require.Equal(t, n, k)
		off += n
	}
	n, err := w.ReadFrom(onlyReader{bytes.NewReader(img[off : off+5*mib+3])})
	require.NoError(t, err)
	off += int(n)
	_, err = w.Write(img[off : off+100])
	require.NoError(t, err)
	off += 100
	_, err = w.ReadFrom(onlyReader{bytes.NewReader(img[off:])})
	require.NoError(t, err)
	total, err := w.Finish()
	require.NoError(t, err)
	require.Equal(t, int64(len(img)), total)
	require.NoError(t, tg.Commit(ctx))
	requireFileHolds(t, filepath.Join(dir, "x.raw"), img)
	want := blkhash.New(1)
	_, _ = want.Write(img)
	require.Equal(t, want.Sum(), content.Sum())
}

func TestFileTargetReplacesExisting(t *testing.T) {
	dir := t.TempDir()
	final := filepath.Join(dir, "disk.img")
	old := bytes.Repeat([]byte("stale"), 3*mib)
	require.NoError(t, os.WriteFile(final, old, 0o644))
	ctx := context.Background()

	// The stale file's space counts as free.
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(dir, &st))
	tg, err := volume.Open(ctx, volume.Options{Path: dir})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, tg.Capacity(), int64(st.Bavail)*st.Bsize+int64(len(old))-int64(mib))

	img := makeImage(4, 2*mib+333, 0.4)
	writeAll(t, tg, img)
	// Until Commit the old image is still there.
	requireFileHolds(t, final, old)
	require.NoError(t, tg.Commit(ctx))
	require.NoError(t, tg.Close())
	requireFileHolds(t, final, img)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left")
}

func TestFileTargetAbortRemovesTemp(t *testing.T) {
	dir := t.TempDir()
	final := filepath.Join(dir, "disk.img")
	require.NoError(t, os.WriteFile(final, []byte("keep me"), 0o644))
	tg, err := volume.Open(context.Background(), volume.Options{Path: final})
	require.NoError(t, err)
	w, err := tg.NewWriter()
	require.NoError(t, err)
	_, err = w.ReadFrom(onlyReader{bytes.NewReader(makeImage(5, 9*mib, 0.2))})
	require.NoError(t, err)
	_, err = os.Stat(tg.WritePath())
	require.NoError(t, err)
	require.NoError(t, tg.Abort())
	_, err = os.Stat(tg.WritePath())
	assert.ErrorIs(t, err, os.ErrNotExist)
	require.NoError(t, tg.Close())
	got, err := os.ReadFile(final)
	require.NoError(t, err)
	assert.Equal(t, "keep me", string(got))

	// Close without Commit also aborts.
	tg, err = volume.Open(context.Background(), volume.Options{Path: dir})
	require.NoError(t, err)
	tmp := tg.WritePath()
	require.NoError(t, tg.Close())
	_, err = os.Stat(tmp)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestFileTargetTooSmall(t *testing.T) {
	dir := t.TempDir()
	tg, err := volume.Open(context.Background(), volume.Options{Path: dir, RequestedSize: 5 * mib})
	require.NoError(t, err)
	defer tg.Close()
	assert.Equal(t, int64(5*mib), tg.Capacity())
	w, err := tg.NewWriter()
	require.NoError(t, err)

	// Exactly the capacity fits; one more byte does not.
	img := makeImage(6, 5*mib+1, 0.2)
	src := iostage.NewCounter(bytes.NewReader(img))
	_, err = w.ReadFrom(src)
	require.ErrorIs(t, err, errdefs.ErrTargetTooSmall)
	var se *errdefs.SizeError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "image data", se.What)
	assert.Equal(t, int64(5*mib), se.TargetSize)
	assert.Equal(t, int64(5*mib+1), se.ImageSize)
	assert.Contains(t, err.Error(), "image data 5242881 is larger than the reported available storage 5242880")
	_, err = w.Finish()
	require.ErrorIs(t, err, errdefs.ErrTargetTooSmall, "errors are sticky")

	// The Write path refuses at once too.
	tg2, err := volume.Open(context.Background(), volume.Options{Path: filepath.Join(dir, "b.img"), RequestedSize: 2 * mib})
	require.NoError(t, err)
	defer tg2.Close()
	w2, err := tg2.NewWriter()
	require.NoError(t, err)
	_, err = w2.Write(img[:2*mib])
	require.NoError(t, err)
	n, err := w2.Write(img[:1])
	require.ErrorIs(t, err, errdefs.ErrTargetTooSmall)
	assert.Zero(t, n)

	// Exactly at capacity succeeds.
	tg3, err := volume.Open(context.Background(), volume.Options{Path: filepath.Join(dir, "c.img"), RequestedSize: 5 * mib})
	require.NoError(t, err)
	defer tg3.Close()
	writeAll(t, tg3, img[:5*mib])
}

func TestOpenRejectsBadPaths(t *testing.T) {
	ctx := context.Background()
	_, err := volume.Open(ctx, volume.Options{Path: filepath.Join(t.TempDir(), "missing", "disk.img")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "missing")
	_, err = volume.Open(ctx, volume.Options{Path: "/dev/null"})
	require.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	_, err = volume.Open(ctx, volume.Options{})
	require.ErrorIs(t, err, errdefs.ErrInvalidOptions)
}

// TestSourceErrorAndCancelNoLeak: a failing source stops the Writer with
// its error; a cancel while the source blocks returns ReadFrom at once, and
// the read-ahead's goroutine ends once the source is closed. In a synctest
// bubble: synctest.Wait returns once ReadFrom waits on the blocked source
// (not after a guessed 100 ms), a ReadFrom that ignored the cancel would
// reach the bubble's 5 s, and the goroutines are counted once settled.
func TestSourceErrorAndCancelNoLeak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		before := runtime.NumGoroutine()
		dir := t.TempDir()

		// A failing source stops the Writer with that error.
		tg, err := volume.Open(context.Background(), volume.Options{Path: dir})
		require.NoError(t, err)
		w, err := tg.NewWriter()
		require.NoError(t, err)
		boom := errors.New("boom")
		_, err = w.ReadFrom(io.MultiReader(bytes.NewReader(makeImage(7, 10*mib, 0.2)), &errReader{boom}))
		require.ErrorIs(t, err, boom)
		require.NoError(t, tg.Close())

		// Cancel while the source blocks.
		ctx, cancel := context.WithCancel(context.Background())
		tg, err = volume.Open(ctx, volume.Options{Path: dir})
		require.NoError(t, err)
		w, err = tg.NewWriter(volume.WithContext(ctx))
		require.NoError(t, err)
		pr, pw := io.Pipe()
		go func() {
			pw.Write(makeImage(8, 6*mib, 0.2))
			// then block until closed
		}()
		errc := make(chan error, 1)
		go func() { _, err := w.ReadFrom(pr); errc <- err }()
		synctest.Wait() // the 6 MiB are in, and the source blocks
		cancel()
		select {
		case err = <-errc:
		case <-time.After(5 * time.Second):
			t.Fatal("ReadFrom did not return after cancel")
		}
		require.ErrorIs(t, err, errdefs.ErrCancelled)
		require.ErrorIs(t, err, context.Canceled)
		_, err = w.Finish()
		require.ErrorIs(t, err, errdefs.ErrCancelled)
		pr.CloseWithError(io.ErrClosedPipe)
		require.NoError(t, tg.Close())
		synctest.Wait()
		require.LessOrEqual(t, runtime.NumGoroutine(), before, "goroutines leaked:\n%s", stacks())
	})
}

type errReader struct{ err error }

func (e *errReader) Read([]byte) (int, error) { return 0, e.err }

func TestBlockTargetContentAndZeroRuns(t *testing.T) {
	const devSize = 24 * mib
	dev := newLoop(t, devSize, fillRandom(11))
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		size int
	}{
		{"odd tail 1MiB+1000", mib + 1000},
		{"smaller than head", 300*1024 + 7},
		{"mixed 17MiB+4097", 17*mib + 4097},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := makeImage(uint64(tc.size), tc.size, 0.4)
			// A long zero run over old data, and one crossing a chunk boundary.
			if tc.size > 10*mib {
				clear(img[2*mib : 7*mib+4096])
				clear(img[8*mib-65536 : 8*mib+65536])
			}
			before := readDev(t, dev, 0, devSize)
			tg, err := volume.Open(ctx, volume.Options{Path: dev})
			require.NoError(t, err)
			defer tg.Close()
			assert.Equal(t, volume.Block, tg.Kind())
			assert.Equal(t, int64(devSize), tg.Capacity())
			assert.Equal(t, dev, tg.WritePath())
			w := writeAll(t, tg, img, volume.WithContext(ctx))
			assert.LessOrEqual(t, w.DataBytes(), int64(len(img)))
			require.NoError(t, tg.Commit(ctx))
			require.NoError(t, tg.Close())
			requireImageOver(t, dev, img, before)
		})
	}
}

func TestBlockTarget4KSectors(t *testing.T) {
	// With 4 KiB logical blocks the O_DIRECT part of the tail shrinks and
	// more of it goes through the buffered descriptor.
	const devSize = 8 * mib
	dev := newLoop(t, devSize, fillRandom(17), "--sector-size", "4096")
	ctx := context.Background()
	img := makeImage(18, 5*mib+4095, 0.3)
	clear(img[5*mib-8192 : 5*mib+4000]) // zero run ending in the unaligned tail
	tg, err := volume.Open(ctx, volume.Options{Path: dev})
	require.NoError(t, err)
	defer tg.Close()
	f, err := os.Open(dev)
	require.NoError(t, err)
	lbs, err := blockdev.LogicalBlockSize(f)
	f.Close()
	require.NoError(t, err)
	require.Equal(t, 4096, lbs)
	writeAll(t, tg, img)
	require.NoError(t, tg.Commit(ctx))
	require.NoError(t, tg.Close())
	requireSameBytes(t, img, readDev(t, dev, 0, int64(len(img))))
}

func TestBlockTargetIsZeroSkips(t *testing.T) {
	const devSize = 16 * mib
	dev := newLoop(t, devSize, nil) // sparse backing: reads zeros
	ctx := context.Background()
	img := make([]byte, 12*mib+5)
	copy(img[5*mib:], makeImage(12, mib, 0))
	copy(img, []byte("MBR"))
	img[len(img)-1] = 0xAA
	tg, err := volume.Open(ctx, volume.Options{Path: dev})
	require.NoError(t, err)
	defer tg.Close()
	w := writeAll(t, tg, img, volume.WithTargetIsZero(true))
	// Only the data granules (plus head granule and tail) were written.
	assert.LessOrEqual(t, w.DataBytes(), int64(mib+2*65536+5))
	require.NoError(t, tg.Commit(ctx))
	require.NoError(t, tg.Close())
	requireSameBytes(t, img, readDev(t, dev, 0, int64(len(img))))
}

func TestBlockTargetTooSmallLeavesFirstMiBZeroed(t *testing.T) {
	const devSize = 8 * mib
	dev := newLoop(t, devSize, fillRandom(13))
	ctx := context.Background()
	tg, err := volume.Open(ctx, volume.Options{Path: dev})
	require.NoError(t, err)
	w, err := tg.NewWriter(volume.WithContext(ctx))
	require.NoError(t, err)
	img := makeImage(14, 9*mib, 0.2)
	src := iostage.NewCounter(bytes.NewReader(img))
	_, err = w.ReadFrom(src)
	require.ErrorIs(t, err, errdefs.ErrTargetTooSmall)
	assert.LessOrEqual(t, src.Count(), int64(devSize+1), "must stop reading right past the end")
	require.NoError(t, tg.Abort())
	require.NoError(t, tg.Close())
	got := readDev(t, dev, 0, devSize)
	requireSameBytes(t, make([]byte, mib), got[:mib])
}

func TestBlockTargetFailedImportLeavesFirstMiBZeroed(t *testing.T) {
	const devSize = 16 * mib
	dev := newLoop(t, devSize, fillRandom(15))
	tg, err := volume.Open(context.Background(), volume.Options{Path: dev})
	require.NoError(t, err)
	w, err := tg.NewWriter()
	require.NoError(t, err)
	boom := errors.New("connection reset")
	_, err = w.ReadFrom(io.MultiReader(bytes.NewReader(makeImage(16, 10*mib, 0.2)), &errReader{boom}))
	require.ErrorIs(t, err, boom)
	require.NoError(t, tg.Close())
	requireSameBytes(t, make([]byte, mib), readDev(t, dev, 0, mib))
}

func TestBlockTargetBusy(t *testing.T) {
	dev := newLoop(t, 4*mib, nil)
	holder, err := blockdev.OpenExclusive(dev, os.O_RDONLY)
	require.NoError(t, err)
	t.Cleanup(func() { holder.Close() })
	_, err = volume.Open(context.Background(), volume.Options{Path: dev})
	require.ErrorIs(t, err, errdefs.ErrTargetBusy)
	assert.Contains(t, err.Error(), "is in use (mounted or opened exclusively by another process)")
	require.NoError(t, holder.Close())
	tg, err := volume.Open(context.Background(), volume.Options{Path: dev})
	require.NoError(t, err)
	require.NoError(t, tg.Close())
}

func stacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// A decompressor reports a truncated stream with a bare io.ErrUnexpectedEOF;
// that, and a wrapped io.EOF, must fail the import, never end it quietly.
func TestTruncatedSourceIsAnError(t *testing.T) {
	for name, srcErr := range map[string]error{
		"bare ErrUnexpectedEOF": io.ErrUnexpectedEOF,
		"wrapped EOF":           fmt.Errorf("short body: %w", io.EOF),
	} {
		t.Run(name, func(t *testing.T) {
			for _, size := range []int{0, 3*mib + 5, 4 * mib, 9 * mib} {
				tg, err := volume.Open(context.Background(), volume.Options{Path: t.TempDir()})
				require.NoError(t, err)
				w, err := tg.NewWriter()
				require.NoError(t, err)
				_, err = w.ReadFrom(io.MultiReader(bytes.NewReader(makeImage(9, size, 0.2)), &errReader{srcErr}))
				require.ErrorIs(t, err, srcErr, "size %d", size)
				_, err = w.Finish()
				require.Error(t, err)
				require.NoError(t, tg.Close())
			}
		})
	}
}

// writeFull writes n non-zero bytes (allocated, not a hole) to dir/name.
func writeFull(t *testing.T, dir, name string, n int) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, bytes.Repeat([]byte{0x5A}, n), 0o644))
	return p
}

// TestOpenRemovesStaleTemporaryFiles: an import killed before Commit (a
// SIGKILL) leaves .disk.img.partial-NNN behind. The next Open removes it and
// counts its space as free; files of any other naming stay.
func TestOpenRemovesStaleTemporaryFiles(t *testing.T) {
	const mib = 1 << 20
	dir := testimg.Tmpfs(t, 16*mib)
	stale := writeFull(t, dir, ".disk.img.partial-2874551093", 10*mib)
	kept := []string{
		writeFull(t, dir, ".disk.img.partial-", 4096),         // no suffix: not CreateTemp's
		writeFull(t, dir, ".disk.img.partial-12x", 4096),      // not all digits
		writeFull(t, dir, ".other.img.partial-123", 4096),     // another target's
		writeFull(t, dir, "disk.img.partial-123", 4096),       // not hidden
		writeFull(t, dir, ".disk.img.partial-123.keep", 4096), // longer name
		writeFull(t, dir, "notes.txt", 4096),
	}
	require.NoError(t, os.Mkdir(filepath.Join(dir, ".disk.img.partial-99"), 0o755)) // a directory
	require.NoError(t, os.Symlink(kept[5], filepath.Join(dir, ".disk.img.partial-77")))

	tgt, err := volume.Open(context.Background(), volume.Options{Path: dir})
	require.NoError(t, err)
	t.Cleanup(func() { tgt.Close() })

	_, err = os.Stat(stale)
	assert.True(t, os.IsNotExist(err), "stale temporary file not removed")
	for _, p := range append(kept, filepath.Join(dir, ".disk.img.partial-99"), filepath.Join(dir, ".disk.img.partial-77")) {
		_, err := os.Lstat(p)
		assert.NoError(t, err, "%s must be kept", filepath.Base(p))
	}
	// The stale file's 10 MiB count as free: without the cleanup at most
	// 6 MiB would be.
	assert.Greater(t, tgt.Capacity(), int64(14*mib), "capacity %d", tgt.Capacity())

	// And they really are: 12 MiB fit on the 16 MiB filesystem.
	w, err := tgt.NewWriter()
	require.NoError(t, err)
	_, err = w.ReadFrom(bytes.NewReader(bytes.Repeat([]byte{0xC3}, 12*mib)))
	require.NoError(t, err)
	_, err = w.Finish()
	require.NoError(t, err)
	require.NoError(t, tgt.Commit(context.Background()))
}

// TestOpenKeepsTheTemporaryFileOfALiveImport: a second Open of the same
// target (another import running meanwhile) must not delete the first
// one's temporary file.
func TestOpenKeepsTheTemporaryFileOfALiveImport(t *testing.T) {
	dir := t.TempDir()
	first, err := volume.Open(context.Background(), volume.Options{Path: dir})
	require.NoError(t, err)
	t.Cleanup(func() { first.Close() })
	second, err := volume.Open(context.Background(), volume.Options{Path: dir})
	require.NoError(t, err)
	t.Cleanup(func() { second.Close() })
	_, err = os.Stat(first.WritePath())
	assert.NoError(t, err, "the live import's temporary file was removed")
	require.NoError(t, second.Close())
	require.NoError(t, first.Close())
	left, err := filepath.Glob(filepath.Join(dir, ".disk.img.partial-*"))
	require.NoError(t, err)
	assert.Empty(t, left)
}

package archive_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/archive"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

const (
	gib = int64(1) << 30
	tib = int64(1) << 40
)

// sparseData is one data region of a test's sparse file.
type sparseData struct {
	off  int64
	data []byte
}

// sparseRegions places data at the start, at an unaligned offset in the
// middle and just before the end of a file of size bytes.
func sparseRegions(size int64) []sparseData {
	rng := rand.New(rand.NewPCG(uint64(size), 7))
	mk := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32()) | 1 // no zero byte: a lost byte shows
		}
		return b
	}
	return []sparseData{
		{0, mk(1 << 20)},
		{size/2 + 12345, mk(300 << 10)},
		{size - 5000, mk(5000)},
	}
}

// gnuSparseTar writes a sparse file of size bytes holding regions and
// archives it with GNU tar --sparse in format ("gnu": the old GNU 'S'
// member; "posix": PAX with a 1.0 sparse map). The archive is small; the
// member's size is the full apparent size.
func gnuSparseTar(t *testing.T, size int64, regions []sparseData, format string) string {
	t.Helper()
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("GNU tar not installed")
	}
	if out, err := exec.Command("tar", "--version").Output(); err != nil || !bytes.Contains(out, []byte("GNU tar")) {
		t.Skip("tar is not GNU tar")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	require.NoError(t, os.Mkdir(src, 0o755))
	f, err := os.Create(filepath.Join(src, "disk.img"))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))
	for _, r := range regions {
		_, err := f.WriteAt(r.data, r.off)
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())
	out := filepath.Join(dir, "sparse-"+format+".tar")
	cmd := exec.Command("tar", "--sparse", "--format="+format, "-C", src, "-cf", out, "disk.img")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, string(b))
	st, err := os.Stat(out)
	require.NoError(t, err)
	require.Less(t, st.Size(), int64(4<<20), "GNU tar did not store the file sparsely")
	return out
}

func extractFile(t *testing.T, ctx context.Context, tarPath, dest string) (archive.Stats, time.Duration, error) {
	t.Helper()
	f, err := os.Open(tarPath)
	require.NoError(t, err)
	defer f.Close()
	start := time.Now()
	st, err := archive.Extract(ctx, f, dest, archive.Options{SkipOwnership: true})
	return st, time.Since(start), err
}

// TestSparseMemberLargerThanVolumeRefused: a 1 TiB sparse member in a tiny
// archive is refused by its size before anything is written, at once: the
// size's error, not the deadline's, and no file, prove it (no stopwatch).
func TestSparseMemberLargerThanVolumeRefused(t *testing.T) {
	dest := testimg.Tmpfs(t, 4*gib)
	for _, format := range []string{"gnu", "posix"} {
		t.Run(format, func(t *testing.T) {
			tarPath := gnuSparseTar(t, tib, sparseRegions(tib), format)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, took, err := extractFile(t, ctx, tarPath, dest)
			t.Logf("refused after %s", took)
			require.Error(t, err)
			assert.ErrorIs(t, err, errdefs.ErrTargetTooSmall)
			assert.False(t, errors.Is(err, errdefs.ErrCancelled), "refused by size, not by the deadline: %v", err)
			assert.ErrorContains(t, err, `"disk.img" is 1099511627776 bytes`)
			_, serr := os.Lstat(filepath.Join(dest, "disk.img"))
			assert.True(t, os.IsNotExist(serr), "nothing of the refused member may be written")
		})
	}
}

// TestSparseMemberHolesAreNotScanned: a sparse member that fits is
// extracted with its holes left as holes, without reading through them
// byte by byte: 48 GiB of holes take about as long as archive/tar needs to
// hand them over (it clears the buffer), not the minutes a per-byte zero
// scan takes. The content is checked region by region, and every data
// extent of the result lies where the source had data.
func TestSparseMemberHolesAreNotScanned(t *testing.T) {
	const size = 48 * gib
	dest := testimg.Tmpfs(t, 64*gib)
	regions := sparseRegions(size)
	for _, format := range []string{"gnu", "posix"} {
		t.Run(format, func(t *testing.T) {
			tarPath := gnuSparseTar(t, size, regions, format)
			out := filepath.Join(dest, format)
			require.NoError(t, os.Mkdir(out, 0o755))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			stats, took, err := extractFile(t, ctx, tarPath, out)
			t.Logf("%s sparse member of %d GiB extracted in %s (%.1f GiB/s)", format, size/gib, took, float64(size)/float64(gib)/took.Seconds())
			require.NoError(t, err)
			assert.Equal(t, size, stats.Bytes)
			checkSparseResult(t, filepath.Join(out, "disk.img"), size, regions)
		})
	}
}

// checkSparseResult compares the data regions, and checks with SEEK_DATA
// that nothing but them was written (the rest reads as zeros: holes).
func checkSparseResult(t *testing.T, path string, size int64, regions []sparseData) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	st, err := f.Stat()
	require.NoError(t, err)
	require.Equal(t, size, st.Size())
	for _, r := range regions {
		got := make([]byte, len(r.data))
		_, err := f.ReadAt(got, r.off)
		require.NoError(t, err)
		require.True(t, bytes.Equal(r.data, got), "data at %d differs", r.off)
	}
	var blocks unix.Stat_t
	require.NoError(t, unix.Fstat(int(f.Fd()), &blocks))
	assert.Less(t, blocks.Blocks*512, int64(16<<20), "holes were written out")
	// Every data extent must touch a region (allocation is per page, so
	// extents round out a little).
	fd := int(f.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		require.NoError(t, err)
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		require.NoError(t, err)
		inRegion := false
		for _, r := range regions {
			if data < r.off+int64(len(r.data)) && hole > r.off {
				inRegion = true
			}
		}
		if !inRegion {
			buf := make([]byte, min(hole-data, 1<<20))
			_, err := f.ReadAt(buf, data)
			if err != io.EOF {
				require.NoError(t, err)
			}
			assert.True(t, bytes.Equal(buf, make([]byte, len(buf))), "data extent %d-%d outside the source's data is not zero", data, hole)
		}
		off = hole
	}
}

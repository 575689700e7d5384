package cloner

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/internal/buffers"
)

// A source read with O_DIRECT (ext4 takes it) gives its bytes as a
// buffered read would, its last chunk included where the size is no
// multiple of the alignment; a source reopened buffered reads the same.
func TestSourceFileReadsEveryByteDirectOrNot(t *testing.T) {
	want := make([]byte, 5*directAlign+1234)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range want {
		want[i] = byte(r.Uint32())
	}
	path := filepath.Join(t.TempDir(), "disk.img")
	require.NoError(t, os.WriteFile(path, want, 0o600))
	for _, direct := range []bool{true, false} {
		dropCache(t, path) // else its pages are read from the cache
		s, err := openSourceFile(path)
		require.NoError(t, err)
		if !direct {
			s.refused.Store(true)
		} else if s.direct == nil {
			s.Close()
			t.Log("O_DIRECT not taken here; the direct case is the buffered one")
			continue
		}
		var got []byte
		buf := buffers.Aligned(2*directAlign, directAlign)
		for off := int64(0); off < s.size; {
			n, err := s.readAt(buf, off)
			require.NoError(t, err)
			require.Positive(t, n)
			got = append(got, buf[:n]...)
			off += int64(n)
		}
		s.Close()
		assert.True(t, bytes.Equal(want, got), "direct=%v: %d bytes read of %d", direct, len(got), len(want))
	}
}

// dropCache writes path's dirty pages back and drops its cached ones.
func dropCache(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Sync())
	require.NoError(t, unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED))
}

// cachedPages is how many of path's pages the page cache holds.
func cachedPages(t *testing.T, path string) uint64 {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var st unix.Cachestat_t
	if err := unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{}, &st, 0); err != nil {
		t.Skipf("cachestat: %v (a kernel before 6.5)", err)
	}
	return st.Cache
}

// Pages the page cache holds are read from it; a range with any page
// missing is read with O_DIRECT, which leaves the cache as it was (a
// plain read would have cached the whole range, and read ahead).
func TestSourceFileReadsCachedPagesFromTheCacheAndTheRestDirect(t *testing.T) {
	const size = 64 * directAlign
	want := make([]byte, size)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range want {
		want[i] = byte(r.Uint32())
	}
	path := filepath.Join(t.TempDir(), "disk.img")
	require.NoError(t, os.WriteFile(path, want, 0o600))
	s, err := openSourceFile(path)
	require.NoError(t, err)
	defer s.Close()
	if s.direct == nil {
		t.Skip("O_DIRECT not taken here")
	}
	dropCache(t, path)
	if n := cachedPages(t, path); n != 0 {
		t.Skipf("%d pages still cached after dropping them: a file system whose pages are the file (tmpfs)", n)
	}
	// The first half cached by a plain read of it, with no readahead.
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM))
	_, err = f.ReadAt(make([]byte, size/2), 0)
	require.NoError(t, err)
	require.EqualValues(t, size/2/os.Getpagesize(), cachedPages(t, path), "a plain read of half of the file caches that half")

	assert.True(t, s.cached(0, size/2))
	assert.True(t, s.cached(directAlign, 3*directAlign))
	assert.False(t, s.cached(0, size), "half of the range is not cached")
	assert.False(t, s.cached(size/2, directAlign))

	buf := buffers.Aligned(size, directAlign)
	n, err := s.readAt(buf, 0)
	require.NoError(t, err)
	require.Equal(t, size, n)
	assert.True(t, bytes.Equal(want, buf), "the bytes read")
	assert.EqualValues(t, size/2/os.Getpagesize(), cachedPages(t, path), "the range with pages missing was read direct")

	// Once cached, read from the cache: the same bytes.
	_, err = f.ReadAt(make([]byte, size), 0)
	require.NoError(t, err)
	require.True(t, s.cached(0, size))
	clear(buf)
	n, err = s.readAt(buf, 0)
	require.NoError(t, err)
	require.Equal(t, size, n)
	assert.True(t, bytes.Equal(want, buf))
}

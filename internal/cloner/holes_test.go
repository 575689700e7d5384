package cloner_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cloner"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// A sparse file as the source (CDI's disk.img on a filesystem volume):
// its holes go as zero records without being read, holes off the
// alignment and holes too short to skip included, data that is zeros
// inside an extent is still found by the scan, and the target is the
// source, byte for byte, with the source's content digest. Resumed
// after a cut, the second request lists the holes from its offset.
func TestASparseSourceFilesHolesAreNotRead(t *testing.T) {
	const size = 40*mib + 12345
	data := testimg.RandomBytes(size, 53)
	src := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(src)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))
	// Data extents: the head; one off every alignment; two 512 KiB apart
	// (a hole shorter than a MiB is read); zeros written as data; the
	// unaligned end.
	written := [][2]int64{
		{0, 1*mib + 100},
		{7*mib + 4097, 7*mib + 70000},
		{12 * mib, 13 * mib}, {13*mib + 512<<10, 14 * mib},
		{20 * mib, 22 * mib},
		{size - 5000, size},
	}
	img := make([]byte, size)
	for _, w := range written {
		copy(img[w[0]:w[1]], data[w[0]:w[1]])
		_, err := f.WriteAt(img[w[0]:w[1]], w[0])
		require.NoError(t, err)
	}
	zeros := make([]byte, 3*mib) // zeros written: data to the file system
	_, err = f.WriteAt(zeros, 30*mib)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	wantDigest := testimg.ContentDigest(t, src)

	p := newPKI(t)
	for _, cut := range []int64{0, 2 * mib} {
		dst := filepath.Join(t.TempDir(), "disk.img")
		var s *served
		url := ""
		if cut == 0 {
			s = startServer(t, p, importer.Options{Target: dst})
		} else {
			var proxy *cuttingProxy
			s, proxy = startServerBehindCut(t, p, importer.Options{Target: dst}, cut)
			url = proxy.addr()
		}
		res, err := send(t, p, s.url(url), cloner.ContentTypeBlock, src, cloner.ProtocolSparseV2)
		require.NoError(t, err)
		sres, serr := s.wait(t)
		require.NoError(t, serr)
		got, err := os.ReadFile(dst)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(img, got), "the target is the source (cut after %d)", cut)
		assert.Equal(t, wantDigest, sres.ContentDigest)
		// The data extents, each widened to 4 KiB, and the zeros written;
		// the holes from 1 MiB on are not read (a resumption may read
		// some of it twice).
		assert.Less(t, res.SourceRead, int64(16*mib), "the holes were read (cut after %d)", cut)
		if cut == 0 {
			assert.GreaterOrEqual(t, res.SourceRead, int64(1*mib+(70000-4097)+2*mib+2*mib+5000+3*mib))
		}
	}
}

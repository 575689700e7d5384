package cloner_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cloner"
	"github.com/diskimport/engine/internal/delta"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

const deltaSize = 32 * mib

// sendDelta runs a delta pass of source to the server at url.
func sendDelta(t *testing.T, p *pki, url, source, base string) (*cloner.Result, error) {
	return cloner.Send(context.Background(), cloner.Options{
		URL: url, ContentType: cloner.ContentTypeBlock, Source: source, Delta: true, DeltaBase: base,
		Client: p.clientFor(t, &p.client), Logger: testimg.Logger(t), RetryDelay: 50e6,
	})
}

// spread is n offsets over a volume of deltaSize, one in each n-th.
func spread(n int) []int64 {
	offs := make([]int64, n)
	for i := range offs {
		offs[i] = int64(i)*(deltaSize/int64(n)) + int64(i%7)*8192
	}
	return offs
}

// TestDeltaPassSendsOnlyTheChangedBlocks: a loop device changed by random
// writes at known offsets since its copy on a file was made is passed to
// the upload server as the changed blocks and the signature, and the file
// then holds the device's bytes.
func TestDeltaPassSendsOnlyTheChangedBlocks(t *testing.T) {
	dir := t.TempDir()
	img := testimg.Raw(t, dir, "source.img", deltaSize, 61)
	dst := filepath.Join(t.TempDir(), "disk.img")
	testimg.CopyOnto(t, img, dst)
	src := testimg.AttachLoop(t, img)
	changed := testimg.WriteRandomAt(t, src, 100, 4096, spread(20)...)
	p := newPKI(t)
	s := startServer(t, p, importer.Options{Target: dst})

	res, err := sendDelta(t, p, s.url(""), src, testimg.ContentDigest(t, dst))
	require.NoError(t, err)
	require.NotNil(t, res.Delta, "the file was a base")
	d := res.Delta
	assert.Equal(t, changed, d.BlocksChanged)
	assert.True(t, d.Final)
	signature := int64(deltaSize / delta.BlockSize * 32)
	assert.LessOrEqual(t, d.SignatureBytes, signature+64)
	// The changed blocks, the signature, and a little for the records,
	// the framing and the requests' headers.
	assert.LessOrEqual(t, res.WireBytes, changed*delta.BlockSize+signature+16<<10, "wire bytes %d for %d changed blocks", res.WireBytes, changed)
	t.Logf("%d of %d blocks changed: %d bytes on the wire (signature %d)", changed, d.Blocks, res.WireBytes, d.SignatureBytes)

	got, err := s.wait(t)
	require.NoError(t, err)
	require.NotNil(t, got.Delta)
	assert.Equal(t, changed, got.Delta.BlocksChanged)
	assert.True(t, got.Delta.Received)
	assert.Equal(t, testimg.ContentDigest(t, src), got.ContentDigest)
	assert.Equal(t, res.Digest, got.ContentDigest)
	assert.Equal(t, testimg.Digest(t, src, -1), testimg.Digest(t, dst, -1))
}

// TestDeltaPassResumesAfterADrop: the connection carrying a delta pass's
// runs onto a loop device is cut; the pass resumes where the server
// stands and the device ends up exact.
func TestDeltaPassResumesAfterADrop(t *testing.T) {
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "source.img", deltaSize, 62)
	dst := testimg.LoopDevice(t, t.TempDir(), deltaSize)
	testimg.CopyOnto(t, src, dst)
	base := testimg.ContentDigest(t, dst)
	// 60 blocks of random bytes, which do not compress: 3.75 MiB of runs.
	offs := spread(60)
	for i := range offs {
		offs[i] &^= delta.BlockSize - 1
	}
	changed := testimg.WriteRandomAt(t, src, 200, delta.BlockSize, offs...)
	p := newPKI(t)
	s := startServer(t, p, importer.Options{Target: dst})
	proxy := startCuttingProxy(t, s.addr, 3*mib)

	res, err := sendDelta(t, p, s.url(proxy.addr()), src, base)
	require.NoError(t, err)
	assert.True(t, proxy.cutted.Load(), "the proxy never cut")
	require.NotNil(t, res.Delta)
	assert.GreaterOrEqual(t, res.Resumes, 1)
	require.Len(t, res.ResumedAt, res.Resumes)
	assert.Positive(t, res.ResumedAt[0], "resumed where the server stood, not from the start")
	assert.Equal(t, changed, res.Delta.BlocksChanged)
	assert.True(t, res.Delta.Final)
	_, err = s.wait(t)
	require.NoError(t, err)
	assert.Equal(t, testimg.Digest(t, src, -1), testimg.Digest(t, dst, -1))
}

// TestDeltaPassOntoNoBaseClonesInFull: a target of another size, or one
// whose digest is not the base named, gets a full sparse-v2 clone, exact.
func TestDeltaPassOntoNoBaseClonesInFull(t *testing.T) {
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "source.img", deltaSize, 63)
	p := newPKI(t)
	for _, tc := range []struct {
		name string
		make func(dst string) string // the base named
	}{
		{"another size", func(dst string) string {
			testimg.Raw(t, filepath.Dir(dst), filepath.Base(dst), deltaSize/2, 63)
			return ""
		}},
		{"another base", func(dst string) string {
			testimg.CopyOnto(t, src, dst)
			testimg.WriteRandomAt(t, dst, 300, 4096, 5*mib)
			return testimg.ContentDigest(t, src) // what it was before someone wrote to it
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "disk.img")
			base := tc.make(dst)
			s := startServer(t, p, importer.Options{Target: dst})
			res, err := sendDelta(t, p, s.url(""), src, base)
			require.NoError(t, err)
			assert.Nil(t, res.Delta, "no base: a full clone")
			assert.Equal(t, cloner.ProtocolSparseV2, res.Protocol)
			got, err := s.wait(t)
			require.NoError(t, err)
			assert.Nil(t, got.Delta)
			assert.Equal(t, testimg.Digest(t, src, -1), testimg.Digest(t, dst, -1))
		})
	}
}

// TestDeltaPassOfASourceBeingWrittenIsWarm: a writer changing the source
// while the pass runs makes it a warm pass, never final; the target is
// the source as sent, and a pass after the writer stopped is final and
// exact.
func TestDeltaPassOfASourceBeingWrittenIsWarm(t *testing.T) {
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "source.img", deltaSize, 64)
	dst := filepath.Join(t.TempDir(), "disk.img")
	testimg.CopyOnto(t, src, dst)
	testimg.WriteRandomAt(t, src, 400, 4096, spread(10)...)
	p := newPKI(t)
	s := startServer(t, p, importer.Options{Target: dst})

	stop := testimg.KeepWriting(t, src, deltaSize)
	res, err := sendDelta(t, p, s.url(""), src, "")
	stop()
	require.NoError(t, err)
	require.NotNil(t, res.Delta)
	assert.False(t, res.Delta.Final, "a pass of a source being written is never final")
	got, err := s.wait(t)
	require.NoError(t, err)
	assert.Equal(t, res.Digest, got.ContentDigest)
	assert.Equal(t, res.Digest, testimg.ContentDigest(t, dst), "the target is the source as sent")

	s = startServer(t, p, importer.Options{Target: dst})
	res, err = sendDelta(t, p, s.url(""), src, got.ContentDigest)
	require.NoError(t, err)
	require.NotNil(t, res.Delta)
	assert.True(t, res.Delta.Final)
	_, err = s.wait(t)
	require.NoError(t, err)
	assert.Equal(t, testimg.Digest(t, src, -1), testimg.Digest(t, dst, -1))
}

// TestDeltaPassToAServerThatGrowsItsFileClonesInFull: a server that grows
// its file target to a requested size holds no copy of the source's size,
// even where a file of that size lies: the clone is a full one, grown.
func TestDeltaPassToAServerThatGrowsItsFileClonesInFull(t *testing.T) {
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "source.img", deltaSize, 65)
	dst := filepath.Join(t.TempDir(), "disk.img")
	testimg.CopyOnto(t, src, dst)
	p := newPKI(t)
	s := startServer(t, p, importer.Options{Target: dst, TargetOptions: importer.TargetOptions{Size: 2 * deltaSize}})
	res, err := sendDelta(t, p, s.url(""), src, "")
	require.NoError(t, err)
	assert.Nil(t, res.Delta, "no base: a full clone")
	_, err = s.wait(t)
	require.NoError(t, err)
	fi, err := os.Stat(dst)
	require.NoError(t, err)
	assert.EqualValues(t, 2*deltaSize, fi.Size(), "grown as the server was asked")
	assert.Equal(t, testimg.Digest(t, src, -1), testimg.Digest(t, dst, deltaSize))
}

// TestDeltaSignatureFetchedAgainAfterADrop: the connection is cut while
// the server's signature comes back; the cloner asks again in the same
// session (internal/retry's backoff), the server sends the same signature
// again, and the pass goes on as a delta pass, exact.
func TestDeltaSignatureFetchedAgainAfterADrop(t *testing.T) {
	const size = 64 * mib // a signature of 32 KiB, 15 KiB once compressed
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "source.img", size, 66)
	dst := filepath.Join(t.TempDir(), "disk.img")
	testimg.CopyOnto(t, src, dst)
	base := testimg.ContentDigest(t, dst)
	answer := compressedSignature(t, dst, size)
	changed := testimg.WriteRandomAt(t, src, 500, 4096, 3*mib, 17*mib, 40*mib)
	p := newPKI(t)
	s := startServer(t, p, importer.Options{Target: dst})
	// Past the TLS handshake and the two HEAD answers (a few KiB), inside
	// the signature.
	proxy := startBackCuttingProxy(t, s.addr, 12<<10)

	res, err := sendDelta(t, p, s.url(proxy.addr()), src, base)
	require.NoError(t, err)
	assert.True(t, proxy.cutted.Load(), "the proxy never cut")
	require.NotNil(t, res.Delta, "still a delta pass")
	assert.Greater(t, res.Delta.SignatureBytes, answer, "a signature and the part of one cut off: it was asked for again")
	assert.Less(t, res.Delta.SignatureBytes, 2*answer, "the signature sent again once")
	assert.Equal(t, 1, res.Resumes)
	assert.Empty(t, res.ResumedAt, "the runs went in one request")
	assert.Equal(t, changed, res.Delta.BlocksChanged)
	assert.True(t, res.Delta.Final)
	got, err := s.wait(t)
	require.NoError(t, err)
	assert.Equal(t, res.Digest, got.ContentDigest)
	assert.Equal(t, testimg.Digest(t, src, -1), testimg.Digest(t, dst, -1))
}

// compressedSignature is the length of the server's answer to a
// signature request for the file at path: its signature, s2-compressed.
func compressedSignature(t *testing.T, path string, size int64) int64 {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	sig, err := delta.Sign(context.Background(), f, size)
	require.NoError(t, err)
	var buf bytes.Buffer
	sw := s2.NewWriter(&buf)
	_, err = sig.WriteTo(sw)
	require.NoError(t, err)
	require.NoError(t, sw.Close())
	return int64(buf.Len())
}

package cloner_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/cloner"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

const mib = 1 << 20

func fileSHA(t *testing.T, path string) string {
	return "sha256:" + testimg.Digest(t, path, -1)
}

func send(t *testing.T, p *pki, url, contentType, source, protocol string) (*cloner.Result, error) {
	return cloner.Send(context.Background(), cloner.Options{
		URL: url, ContentType: contentType, Source: source, Protocol: protocol,
		Client: p.clientFor(t, &p.client), Logger: testimg.Logger(t), RetryDelay: 50e6,
	})
}

// TestCloneBlockToBlock clones a loop device onto smaller, equal and larger
// loop devices over HTTPS with mutual TLS, in our format and in CDI's.
func TestCloneBlockToBlock(t *testing.T) {
	dir := t.TempDir()
	img := testimg.Raw(t, dir, "source.img", 8*mib, 7)
	src := testimg.LoopDevice(t, dir, 8*mib)
	testimg.WriteDevice(t, src, img)
	want := testimg.Digest(t, img, -1)
	p := newPKI(t)

	t.Run("smaller target refused before writing", func(t *testing.T) {
		dst := testimg.LoopDevice(t, t.TempDir(), 4*mib)
		before := testimg.Digest(t, dst, -1)
		for _, protocol := range []string{cloner.ProtocolAuto, cloner.ProtocolSnappy} {
			s := startServer(t, p, importer.Options{Target: dst})
			_, err := send(t, p, s.url(""), cloner.ContentTypeBlock, src, protocol)
			require.Error(t, err)
			assert.ErrorIs(t, err, errdefs.ErrTargetTooSmall, protocol)
			// Refused on the source's size, not when the data overflowed.
			assert.Contains(t, err.Error(), "source size", protocol)
			assert.Equal(t, before, testimg.Digest(t, dst, -1), "%s: the target was written", protocol)
		}
	})
	for _, tc := range []struct {
		name     string
		size     int64
		protocol string
	}{
		{"equal sparse-v2", 8 * mib, cloner.ProtocolAuto},
		{"larger sparse-v2", 12 * mib, cloner.ProtocolSparseV2},
		{"equal snappy", 8 * mib, cloner.ProtocolSnappy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := testimg.LoopDevice(t, t.TempDir(), tc.size)
			s := startServer(t, p, importer.Options{Target: dst})
			res, err := send(t, p, s.url(""), cloner.ContentTypeBlock, src, tc.protocol)
			require.NoError(t, err)
			sres, serr := s.wait(t)
			require.NoError(t, serr)
			assert.Equal(t, want, testimg.Digest(t, dst, 8*mib), "target content")
			assert.Equal(t, testimg.ContentDigest(t, img), sres.ContentDigest, "both protocols record the source's content digest")
			if tc.protocol == cloner.ProtocolSnappy {
				assert.Equal(t, cloner.ProtocolSnappy, res.Protocol)
				return
			}
			assert.Equal(t, cloner.ProtocolSparseV2, res.Protocol)
			assert.Equal(t, testimg.ContentDigest(t, img), res.Digest)
			assert.True(t, sres.Verified)
			assert.Equal(t, res.Digest, sres.SourceDigest)
			assert.Equal(t, res.Digest, sres.TargetDigest)
			assert.Less(t, res.WireBytes, int64(8*mib*7/10), "zero runs went over the wire")
		})
	}
	t.Run("exact size refuses a larger device", func(t *testing.T) {
		dst := testimg.LoopDevice(t, t.TempDir(), 12*mib)
		before := testimg.Digest(t, dst, -1)
		s := startServer(t, p, importer.Options{Target: dst, TargetOptions: importer.TargetOptions{ExactSize: true}})
		_, err := send(t, p, s.url(""), cloner.ContentTypeBlock, src, cloner.ProtocolAuto)
		require.Error(t, err)
		assert.Equal(t, before, testimg.Digest(t, dst, -1), "the target was written")
	})
}

// TestCloneBlockToFile clones a device into a filesystem volume's image.
func TestCloneBlockToFile(t *testing.T) {
	dir := t.TempDir()
	img := testimg.Raw(t, dir, "source.img", 6*mib, 11)
	src := testimg.LoopDevice(t, dir, 6*mib)
	testimg.WriteDevice(t, src, img)
	p := newPKI(t)
	dst := filepath.Join(t.TempDir(), "disk.img")
	s := startServer(t, p, importer.Options{Target: dst})
	_, err := send(t, p, s.url(""), cloner.ContentTypeBlock, src, cloner.ProtocolAuto)
	require.NoError(t, err)
	_, serr := s.wait(t)
	require.NoError(t, serr)
	assert.Equal(t, fileSHA(t, img), fileSHA(t, dst))
	assert.Less(t, testimg.Allocated(t, dst), int64(6*mib*8/10), "zero runs are holes in the target")
}

// TestCloneFilesystem clones a directory holding disk.img and other files
// (CDI's filesystem clone: a tar in snappy framing) into another.
func TestCloneFilesystem(t *testing.T) {
	src := t.TempDir()
	testimg.Raw(t, src, "disk.img", 4*mib, 3)
	require.NoError(t, os.WriteFile(filepath.Join(src, "notes.txt"), []byte("kept beside the disk\n"), 0o640))
	require.NoError(t, os.Mkdir(filepath.Join(src, "sub"), 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(src, "sub", "inner"), []byte("inner file"), 0o600))
	require.NoError(t, os.Mkdir(filepath.Join(src, "lost+found"), 0o700))
	dst := t.TempDir()
	p := newPKI(t)
	s := startServer(t, p, importer.Options{Target: filepath.Join(dst, "disk.img")})
	res, err := send(t, p, s.url(""), cloner.ContentTypeFilesystem, src, cloner.ProtocolAuto)
	require.NoError(t, err)
	assert.Equal(t, cloner.ProtocolSnappy, res.Protocol)
	_, serr := s.wait(t)
	require.NoError(t, serr)
	for _, name := range []string{"disk.img", "notes.txt", "sub/inner"} {
		assert.Equal(t, fileSHA(t, filepath.Join(src, name)), fileSHA(t, filepath.Join(dst, name)), name)
	}
	fi, err := os.Stat(filepath.Join(dst, "notes.txt"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), fi.Mode().Perm())
	assert.NoDirExists(t, filepath.Join(dst, "lost+found"))
}

// TestCloneFilesystemToBlock: a filesystem clone onto a block volume
// writes its disk.img alone.
func TestCloneFilesystemToBlock(t *testing.T) {
	src := t.TempDir()
	img := testimg.Raw(t, src, "disk.img", 4*mib, 5)
	require.NoError(t, os.WriteFile(filepath.Join(src, "other"), []byte("not on the device"), 0o600))
	dst := testimg.LoopDevice(t, t.TempDir(), 4*mib)
	p := newPKI(t)
	s := startServer(t, p, importer.Options{Target: dst})
	_, err := send(t, p, s.url(""), cloner.ContentTypeFilesystem, src, cloner.ProtocolAuto)
	require.NoError(t, err)
	_, serr := s.wait(t)
	require.NoError(t, serr)
	assert.Equal(t, testimg.Digest(t, img, -1), testimg.Digest(t, dst, -1))
}

// A filesystem volume that holds only its disk.img (lost+found aside)
// goes to our server as that file's sparse-v2 records, not a tar of every
// byte: onto a filesystem volume's disk.img (its zero runs holes) and
// onto a block volume, its content the source's, its zeros never on the
// wire; a volume that holds more goes as the tar (TestCloneFilesystem).
func TestCloneFilesystemDiskImageGoesAsRecords(t *testing.T) {
	src := t.TempDir()
	img := testimg.Raw(t, src, "disk.img", 6*mib, 17)
	require.NoError(t, os.Truncate(img, 48*mib)) // 42 MiB of zeros after the data
	require.NoError(t, os.Mkdir(filepath.Join(src, "lost+found"), 0o700))
	p := newPKI(t)
	targets := map[string]string{"filesystem": filepath.Join(t.TempDir(), "disk.img")}
	if os.Geteuid() == 0 {
		targets["block"] = testimg.LoopDevice(t, t.TempDir(), 48*mib)
	}
	for name, dst := range targets {
		t.Run(name, func(t *testing.T) {
			s := startServer(t, p, importer.Options{Target: dst})
			res, err := send(t, p, s.url(""), cloner.ContentTypeFilesystem, src, cloner.ProtocolAuto)
			require.NoError(t, err)
			assert.Equal(t, cloner.ProtocolSparseV2, res.Protocol)
			assert.Less(t, res.WireBytes, int64(8*mib), "the zeros crossed the wire")
			sres, serr := s.wait(t)
			require.NoError(t, serr)
			assert.Equal(t, testimg.ContentDigest(t, img), sres.ContentDigest)
			assert.Equal(t, testimg.Digest(t, img, -1), testimg.Digest(t, dst, 48*mib))
			if name == "filesystem" {
				assert.Less(t, testimg.Allocated(t, dst), int64(12*mib), "zero runs are holes in the target")
			}
		})
	}
	t.Run("sparse-v2 asked of a volume that holds more", func(t *testing.T) {
		require.NoError(t, os.WriteFile(filepath.Join(src, "notes.txt"), []byte("more"), 0o600))
		s := startServer(t, p, importer.Options{Target: filepath.Join(t.TempDir(), "disk.img")})
		_, err := send(t, p, s.url(""), cloner.ContentTypeFilesystem, src, cloner.ProtocolSparseV2)
		require.ErrorIs(t, err, errdefs.ErrInvalidOptions)
		assert.Contains(t, err.Error(), "holds more")
	})
}

// TestCloneResumesAfterDrop cuts the connection halfway: the clone
// resumes from the server's offset, not from 0, and completes verified.
func TestCloneResumesAfterDrop(t *testing.T) {
	dir := t.TempDir()
	img := testimg.Raw(t, dir, "source.img", 24*mib, 13)
	dst := filepath.Join(t.TempDir(), "disk.img")
	p := newPKI(t)
	s, proxy := startServerBehindCut(t, p, importer.Options{Target: dst}, 4*mib)
	res, err := send(t, p, s.url(proxy.addr()), cloner.ContentTypeBlock, img, cloner.ProtocolAuto)
	require.NoError(t, err)
	assert.True(t, proxy.cutted.Load(), "the proxy never cut")
	assert.GreaterOrEqual(t, res.Resumes, 1)
	sres, serr := s.wait(t)
	require.NoError(t, serr)
	assert.Equal(t, fileSHA(t, img), fileSHA(t, dst))
	assert.Equal(t, testimg.ContentDigest(t, img), sres.SourceDigest)
	// One digest: what the source sent is what the import records.
	assert.Equal(t, sres.SourceDigest, sres.ContentDigest)
	assert.True(t, sres.Verified)
	// Resumed, not restarted: the wire carried less than two full sends.
	full, _ := os.ReadFile(img)
	assert.Less(t, res.WireBytes, int64(len(full)), "the clone started over")
}

// TestCloneDigestMismatch: a stream whose digest does not match what was
// received fails, and the target is not committed.
func TestCloneDigestMismatch(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "disk.img")
	p := newPKI(t)
	s := startServer(t, p, importer.Options{Target: dst})
	body, wrong := forgedStream(t, []byte("some data that the digest does not describe"))
	status, answer := postSparseStream(t, p, s, body, "forged")
	assert.GreaterOrEqual(t, status, 400)
	assert.Contains(t, answer, errdefs.ErrVerifyMismatch.Error())
	assert.Contains(t, answer, hex.EncodeToString(wrong[:]))
	assert.NoFileExists(t, dst)
}

// postSparseStream POSTs body to s as a block clone's sparse-v2 request of
// session and returns the answer's status and text.
func postSparseStream(t *testing.T, p *pki, s *served, body io.Reader, session string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url(""), body)
	require.NoError(t, err)
	req.Header.Set("x-cdi-content-type", cloner.ContentTypeBlock)
	req.Header.Set(cloner.ProtocolHeader, cloner.ProtocolSparseV2)
	req.Header.Set(cloner.SessionHeader, session)
	resp, err := p.clientFor(t, &p.client).Do(req)
	require.NoError(t, err)
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(answer)
}

// A sparse-v2 stream whose data was changed inside its s2 block (whose
// CRC the server no longer checks) with the right digest of the data
// before: the content digest refuses it, nothing committed.
func TestCloneDamagedInsideACompressedBlockFailsItsDigest(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "disk.img")
	p := newPKI(t)
	s := startServer(t, p, importer.Options{Target: dst})
	data := make([]byte, 256<<10)
	_, _ = rand.Read(data) // incompressible: s2 stores it as it is
	h := blkhash.New(0)
	_, _ = h.Write(data)
	var buf bytes.Buffer
	sw := s2.NewWriter(&buf)
	enc := cloner.NewEncoder(sw)
	for _, err := range []error{enc.Start(int64(len(data)), 0), enc.Data(0, data), enc.End(h.Sum()), sw.Close()} {
		require.NoError(t, err)
	}
	wire := buf.Bytes()
	at := bytes.Index(wire, data[1000:1064])
	require.Positive(t, at, "the data lies in the stream as it is")
	wire[at] ^= 0x40
	status, answer := postSparseStream(t, p, s, bytes.NewReader(wire), "damaged")
	assert.GreaterOrEqual(t, status, 400)
	assert.Contains(t, answer, errdefs.ErrVerifyMismatch.Error())
	assert.NoFileExists(t, dst)
}

// TestCloneChecksum: the import's checksum applies to a clone's bytes: a
// wrong one fails it with nothing committed, the right one passes.
func TestCloneChecksum(t *testing.T) {
	img := testimg.Raw(t, t.TempDir(), "source.img", 3*mib, 19)
	p := newPKI(t)
	for _, protocol := range []string{cloner.ProtocolSparseV2, cloner.ProtocolSnappy} {
		dst := filepath.Join(t.TempDir(), "disk.img")
		s := startServer(t, p, importer.Options{Target: dst, Checksums: []string{"sha256:" + strings.Repeat("0", 64)}})
		_, err := send(t, p, s.url(""), cloner.ContentTypeBlock, img, protocol)
		require.Error(t, err, protocol)
		assert.Contains(t, err.Error(), errdefs.ErrChecksumMismatch.Error(), protocol)
		assert.NoFileExists(t, dst, protocol)

		s = startServer(t, p, importer.Options{Target: dst, Checksums: []string{fileSHA(t, img)}})
		_, err = send(t, p, s.url(""), cloner.ContentTypeBlock, img, protocol)
		require.NoError(t, err, protocol)
		res, serr := s.wait(t)
		require.NoError(t, serr)
		assert.Equal(t, []string{fileSHA(t, img)}, res.Checksums)
		assert.Equal(t, fileSHA(t, img), fileSHA(t, dst))
	}
}

// TestCloneExpectContentDigest: an expected content digest is checked on
// both protocols: a wrong one commits nothing, the right one passes.
func TestCloneExpectContentDigest(t *testing.T) {
	img := testimg.Raw(t, t.TempDir(), "source.img", 3*mib, 20)
	want := testimg.ContentDigest(t, img)
	p := newPKI(t)
	for _, protocol := range []string{cloner.ProtocolSparseV2, cloner.ProtocolSnappy} {
		dst := filepath.Join(t.TempDir(), "disk.img")
		s := startServer(t, p, importer.Options{Target: dst, TargetOptions: importer.TargetOptions{ExpectContentDigest: "blk-sha256:" + strings.Repeat("0", 64)}})
		_, err := send(t, p, s.url(""), cloner.ContentTypeBlock, img, protocol)
		require.Error(t, err, protocol)
		assert.Contains(t, err.Error(), errdefs.ErrChecksumMismatch.Error(), protocol)
		assert.NoFileExists(t, dst, protocol)

		s = startServer(t, p, importer.Options{Target: dst, TargetOptions: importer.TargetOptions{ExpectContentDigest: want}})
		_, err = send(t, p, s.url(""), cloner.ContentTypeBlock, img, protocol)
		require.NoError(t, err, protocol)
		res, serr := s.wait(t)
		require.NoError(t, serr)
		assert.Equal(t, want, res.ContentDigest, protocol)
		assert.Equal(t, fileSHA(t, img), fileSHA(t, dst))
	}
}

// forgedStream is a sparse-v2 body carrying data with a wrong digest.
func forgedStream(t *testing.T, data []byte) (io.Reader, blkhash.Digest) {
	var buf bytes.Buffer
	sw := s2.NewWriter(&buf)
	enc := cloner.NewEncoder(sw)
	wrong := blkhash.Digest(sha256.Sum256(append([]byte("not "), data...)))
	for _, err := range []error{enc.Start(int64(len(data)), 0), enc.Data(0, data), enc.End(wrong), sw.Close()} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return &buf, wrong
}

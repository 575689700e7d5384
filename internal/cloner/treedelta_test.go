package cloner_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cloner"
	"github.com/diskimport/engine/internal/delta"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// newVolume makes a KubeVirt-like filesystem volume in a new directory:
// a disk.img of deltaSize, a few small files (one empty) in a
// subdirectory, a symlink to the disk.
func newVolume(t *testing.T, seed uint64) string {
	dir := t.TempDir()
	testimg.Raw(t, dir, "disk.img", deltaSize, seed)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "meta"), 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "meta", "config.json"), []byte(`{"disk":"disk.img"}`), 0o640))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), testimg.RandomBytes(100<<10, seed), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "meta", "empty"), nil, 0o644))
	require.NoError(t, os.Symlink("disk.img", filepath.Join(dir, "current")))
	return dir
}

// volumeState lists a volume's entries: kind, mode, size, link target
// and the sha256 of a file's bytes; and a file's mtime.
func volumeState(t *testing.T, dir string) []string {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s %s", rel, fi.Mode())
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			line += fmt.Sprintf(" %d %s %d", fi.Size(), hex.EncodeToString(sum[:]), fi.ModTime().UnixNano())
		case fi.Mode()&fs.ModeSymlink != 0:
			link, _ := os.Readlink(p)
			line += " -> " + link
		}
		out = append(out, line)
		return nil
	})
	require.NoError(t, err)
	return out
}

// sendTree runs a filesystem delta pass of the volume src to the server
// at url.
func sendTree(t *testing.T, p *pki, url, src, base string, retries int) (*cloner.Result, error) {
	return cloner.Send(context.Background(), cloner.Options{
		URL: url, ContentType: cloner.ContentTypeFilesystem, Source: src, Delta: true, DeltaBase: base,
		Client: p.clientFor(t, &p.client), Logger: testimg.Logger(t), RetryDelay: 50e6, Retries: retries,
	})
}

// passOnto runs one pass of src onto the server's directory dst and
// checks both ends report the same volume digest.
func passOnto(t *testing.T, p *pki, src, dst, base string) *cloner.Result {
	s := startServer(t, p, importer.Options{Target: filepath.Join(dst, "disk.img")})
	res, err := sendTree(t, p, s.url(""), src, base, 0)
	require.NoError(t, err)
	require.NotNil(t, res.Delta)
	got, err := s.wait(t)
	require.NoError(t, err)
	assert.Equal(t, res.Digest, got.ContentDigest)
	return res
}

// copiedVolume makes a volume from seed (newVolume) and a directory a
// first pass copied it onto; it returns both, the PKI the server and the
// cloner share and the first pass's result.
func copiedVolume(t *testing.T, seed uint64) (src, dst string, p *pki, first *cloner.Result) {
	src = newVolume(t, seed)
	dst = t.TempDir()
	p = newPKI(t)
	return src, dst, p, passOnto(t, p, src, dst, "")
}

// blockStarts is spread(n) with each offset moved down to the start of its
// delta block, so a write of delta.BlockSize there changes one block.
func blockStarts(n int) []int64 {
	offs := spread(n)
	for i := range offs {
		offs[i] &^= delta.BlockSize - 1
	}
	return offs
}

// TestFilesystemDeltaPassSendsTheChangedBlocksOfItsDisk: a first pass
// onto an empty volume sends everything; after random writes at known
// offsets of the source's disk.img, a changed, an added and a removed
// small file, the second sends the disk's changed blocks and the changed
// and added small files whole (the unchanged one is kept), and the
// target then holds the source's entries, bytes, modes and times.
func TestFilesystemDeltaPassSendsTheChangedBlocksOfItsDisk(t *testing.T) {
	src, dst, p, first := copiedVolume(t, 71)
	assert.Equal(t, volumeState(t, src), volumeState(t, dst))
	assert.True(t, first.Delta.Final)
	assert.Equal(t, cloner.ProtocolSparseV2+"+"+cloner.DeltaV1+"+"+cloner.DeltaTree, first.Protocol)

	changed := testimg.WriteRandomAt(t, filepath.Join(src, "disk.img"), 100, 4096, spread(20)...)
	require.NoError(t, os.WriteFile(filepath.Join(src, "meta", "config.json"), []byte(`{"disk":"disk.img","v":2}`), 0o640))
	require.NoError(t, os.WriteFile(filepath.Join(src, "meta", "added"), []byte("new"), 0o644))
	require.NoError(t, os.Remove(filepath.Join(src, "notes.txt")))

	second := passOnto(t, p, src, dst, first.Digest)
	assert.Equal(t, volumeState(t, src), volumeState(t, dst))
	d := second.Delta
	assert.False(t, d.Full, "the target was the base")
	assert.Equal(t, changed+2, d.BlocksChanged, "the disk's changed blocks and the changed and the added small file, one block each")
	assert.True(t, d.Final)
	assert.Equal(t, first.Digest, d.BaseDigest)
	assert.NotEqual(t, first.Digest, second.Digest)
	assert.LessOrEqual(t, second.WireBytes, changed*delta.BlockSize+deltaSize/delta.BlockSize*32+32<<10, "wire bytes %d for %d changed blocks", second.WireBytes, changed)
	t.Logf("%d of %d blocks sent: %d bytes on the wire (signature %d)", d.BlocksChanged, d.Blocks, second.WireBytes, d.SignatureBytes)
}

// TestFilesystemDeltaPassResumesAfterADrop: the connection carrying the
// runs is cut; the pass resumes where the server stands, and the volume
// ends up exact (a small file with only its mode changed kept, its mode
// set).
func TestFilesystemDeltaPassResumesAfterADrop(t *testing.T) {
	src, dst, p, first := copiedVolume(t, 72)
	offs := blockStarts(60)
	changed := testimg.WriteRandomAt(t, filepath.Join(src, "disk.img"), 200, delta.BlockSize, offs...)
	// Kept (the same bytes), but with another mode, which the target takes.
	require.NoError(t, os.Chmod(filepath.Join(src, "meta", "config.json"), 0o600))

	s, proxy := startServerBehindCut(t, p, importer.Options{Target: filepath.Join(dst, "disk.img")}, 3*mib)
	res, err := sendTree(t, p, s.url(proxy.addr()), src, first.Digest, 0)
	require.NoError(t, err)
	assert.True(t, proxy.cutted.Load(), "the proxy never cut")
	assert.GreaterOrEqual(t, res.Resumes, 1)
	require.NotEmpty(t, res.ResumedAt)
	assert.Positive(t, res.ResumedAt[0], "resumed where the server stood, not from the start")
	assert.Equal(t, changed, res.Delta.BlocksChanged, "the disk's changed blocks; the small files, unchanged, kept")
	_, err = s.wait(t)
	require.NoError(t, err)
	assert.Equal(t, volumeState(t, src), volumeState(t, dst))
}

// TestFilesystemDeltaPassCutOffLeavesNoCompleteVolume: a pass cut off
// with no retry leaves the target's disk.img without its first MiB (the
// held end: no partition table, no boot sector) and the small files as
// they were: nothing of it passes for a copy.
func TestFilesystemDeltaPassCutOffLeavesNoCompleteVolume(t *testing.T) {
	src, dst, p, first := copiedVolume(t, 73)
	offs := blockStarts(60)
	testimg.WriteRandomAt(t, filepath.Join(src, "disk.img"), 300, delta.BlockSize, offs...)
	require.NoError(t, os.WriteFile(filepath.Join(src, "meta", "config.json"), []byte(`{"v":3}`), 0o640))
	before := volumeState(t, dst)

	s, proxy := startServerBehindCut(t, p, importer.Options{Target: filepath.Join(dst, "disk.img")}, 3*mib)
	_, err := sendTree(t, p, s.url(proxy.addr()), src, first.Digest, -1)
	require.Error(t, err)
	assert.True(t, proxy.cutted.Load())
	testimg.AssertZeros(t, filepath.Join(dst, "disk.img"), 0, 1<<20)
	config, err := os.ReadFile(filepath.Join(dst, "meta", "config.json"))
	require.NoError(t, err)
	assert.Equal(t, `{"disk":"disk.img"}`, string(config), "a file sent whole is put in place only once the volume's digest matched")
	assert.NotEqual(t, before, volumeState(t, dst))
	assert.NotEqual(t, volumeState(t, src), volumeState(t, dst))
}

// TestFilesystemDeltaPassOntoAnotherBaseSendsEverything: a target written
// to since the last pass is not the base named: every file is sent whole
// and renamed into place, and the volume ends up exact.
func TestFilesystemDeltaPassOntoAnotherBaseSendsEverything(t *testing.T) {
	src, dst, p, first := copiedVolume(t, 74)
	testimg.WriteRandomAt(t, filepath.Join(dst, "disk.img"), 400, 4096, 5*mib)
	testimg.WriteRandomAt(t, filepath.Join(src, "disk.img"), 401, 4096, 9*mib)

	res := passOnto(t, p, src, dst, first.Digest)
	assert.True(t, res.Delta.Full, "no base: everything sent")
	assert.NotEqual(t, first.Digest, res.Delta.BaseDigest)
	assert.Greater(t, res.Delta.DataBytes, int64(deltaSize/4), "the whole disk's data")
	assert.Equal(t, volumeState(t, src), volumeState(t, dst))
}

// TestFilesystemDeltaPassOfAVolumeBeingWrittenIsWarm: a writer changing
// the source's disk.img during the pass makes it warm, never final; the
// target is the volume as sent, and a pass after the writer stopped is
// final and exact.
func TestFilesystemDeltaPassOfAVolumeBeingWrittenIsWarm(t *testing.T) {
	src, dst, p, first := copiedVolume(t, 75)
	testimg.WriteRandomAt(t, filepath.Join(src, "disk.img"), 500, 4096, spread(10)...)

	stop := testimg.KeepWriting(t, filepath.Join(src, "disk.img"), deltaSize)
	warm := passOnto(t, p, src, dst, first.Digest)
	stop()
	assert.False(t, warm.Delta.Final, "a pass of a volume being written is never final")

	last := passOnto(t, p, src, dst, warm.Digest)
	assert.True(t, last.Delta.Final)
	assert.False(t, last.Delta.Full, "the warm pass's target was the base")
	assert.Equal(t, volumeState(t, src), volumeState(t, dst))
}

// TestFilesystemDeltaPassDoesNotWriteThroughASymlink: the target's
// disk.img is a symlink to a file outside the volume; the pass replaces
// the link with the source's file and leaves the outside file as it was.
func TestFilesystemDeltaPassDoesNotWriteThroughASymlink(t *testing.T) {
	src := newVolume(t, 76)
	outside := filepath.Join(t.TempDir(), "outside.img")
	testimg.CopyOnto(t, filepath.Join(src, "disk.img"), outside)
	testimg.WriteRandomAt(t, outside, 600, 4096, 1*mib)
	want := testimg.FileDigest(t, outside)
	dst := t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(dst, "disk.img")))

	res := passOnto(t, newPKI(t), src, dst, "")
	assert.Positive(t, res.Delta.DataBytes)
	assert.Equal(t, want, testimg.FileDigest(t, outside), "the file outside the volume is untouched")
	assert.Equal(t, volumeState(t, src), volumeState(t, dst))
}

// TestFilesystemDeltaSignatureFetchedAgainAfterADrop: the connection is
// cut while the server's answer (the disk's signature) comes back; the
// cloner asks again with the same manifest in the same session, the
// server answers again, and the pass sends only what changed, exact.
func TestFilesystemDeltaSignatureFetchedAgainAfterADrop(t *testing.T) {
	src, dst, p, first := copiedVolume(t, 77)
	changed := testimg.WriteRandomAt(t, filepath.Join(src, "disk.img"), 700, 4096, spread(8)...)

	s := startServer(t, p, importer.Options{Target: filepath.Join(dst, "disk.img")})
	// Past the TLS handshake and the two HEAD answers (about 2 KiB),
	// inside the answer to the signature request.
	proxy := startBackCuttingProxy(t, s.addr, 5<<10)
	res, err := sendTree(t, p, s.url(proxy.addr()), src, first.Digest, 0)
	require.NoError(t, err)
	assert.True(t, proxy.cutted.Load(), "the proxy never cut")
	assert.Equal(t, 1, res.Resumes, "the signature asked for again")
	assert.Empty(t, res.ResumedAt, "the runs went in one request")
	assert.Equal(t, changed, res.Delta.BlocksChanged)
	got, err := s.wait(t)
	require.NoError(t, err)
	assert.Equal(t, res.Digest, got.ContentDigest)
	assert.Equal(t, volumeState(t, src), volumeState(t, dst))
}

// TestFilesystemDeltaPassLeavesAHardLinkOutsideAlone: the target's small
// file, with the source's bytes, is also linked from outside the volume;
// it is not kept (its mode would change the outside name's too) but
// replaced, and the outside file keeps its mode and bytes.
func TestFilesystemDeltaPassLeavesAHardLinkOutsideAlone(t *testing.T) {
	src, dst, p, first := copiedVolume(t, 78)
	outside := filepath.Join(dst, "..", filepath.Base(dst)+"-outside")
	require.NoError(t, os.Link(filepath.Join(dst, "notes.txt"), outside))
	t.Cleanup(func() { os.Remove(outside) })
	require.NoError(t, os.Chmod(filepath.Join(src, "notes.txt"), 0o644))
	want := testimg.FileDigest(t, outside)

	passOnto(t, p, src, dst, first.Digest)
	fi, err := os.Stat(outside)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the outside name's mode is untouched")
	assert.Equal(t, want, testimg.FileDigest(t, outside))
	assert.Equal(t, volumeState(t, src), volumeState(t, dst))
}

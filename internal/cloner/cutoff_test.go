package cloner_test

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cloner"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/uploadserver"
)

// waitFailed waits until the server has recorded a failed clone and is free.
func waitFailed(t *testing.T, p *pki, s *served) {
	waitStatus(t, p, s, "the failed clone recorded", func(st uploadserver.Status) bool { return !st.Busy && st.Phase == "Error" })
}

// dirState is every entry under dir with its content's digest.
func dirState(t *testing.T, dir string) map[string]string {
	state := map[string]string{}
	require.NoError(t, filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		state[rel] = fi.Mode().String()
		if fi.Mode().IsRegular() {
			state[rel] += " " + testimg.Digest(t, path, -1)
		}
		return nil
	}))
	return state
}

// TestFilesystemCloneCutOffLeavesTheTargetAsItWas: CDI's filesystem clone
// (a tar in snappy framing) cut off halfway through its disk.img leaves the
// target directory exactly as it was: the extraction was staged and never
// committed, and the staging directory is gone.
func TestFilesystemCloneCutOffLeavesTheTargetAsItWas(t *testing.T) {
	src := t.TempDir()
	testimg.Raw(t, src, "disk.img", 12*mib, 31)
	require.NoError(t, os.WriteFile(filepath.Join(src, "a-first.txt"), []byte("extracted before the disk\n"), 0o644))
	dst := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dst, "kept.txt"), []byte("was here before the clone\n"), 0o600))
	before := dirState(t, dst)
	p := newPKI(t)
	s, proxy := startServerBehindCut(t, p, importer.Options{Target: filepath.Join(dst, "disk.img")}, mib)
	_, err := send(t, p, s.url(proxy.addr()), cloner.ContentTypeFilesystem, src, cloner.ProtocolSnappy)
	require.Error(t, err)
	assert.True(t, proxy.cutted.Load(), "the proxy never cut")
	waitFailed(t, p, s)
	assert.Equal(t, before, dirState(t, dst), "the target directory changed")
}

// TestBlockCloneCutOffLeavesTheHeadZeroed: CDI's block clone cut off
// after its first chunks reached the device leaves the device's first MiB
// zeroed (the old one was wiped before the first write, the source's is
// never written), as an import does, so the half-written volume looks
// like neither the source's disk nor what it held.
func TestBlockCloneCutOffLeavesTheHeadZeroed(t *testing.T) {
	dir := t.TempDir()
	img := testimg.Raw(t, dir, "source.img", 12*mib, 37)
	dst := testimg.LoopDevice(t, t.TempDir(), 12*mib)
	zeros := filepath.Join(dir, "zeros")
	require.NoError(t, os.WriteFile(zeros, make([]byte, mib), 0o600))
	p := newPKI(t)
	s, proxy := startServerBehindCut(t, p, importer.Options{Target: dst}, 4*mib)
	_, err := send(t, p, s.url(proxy.addr()), cloner.ContentTypeBlock, img, cloner.ProtocolSnappy)
	require.Error(t, err)
	assert.True(t, proxy.cutted.Load(), "the proxy never cut")
	waitFailed(t, p, s)
	assert.Equal(t, mibAt(t, img, 1), mibAt(t, dst, 1), "the clone never reached the device: cut later")
	head := testimg.Digest(t, dst, mib)
	assert.NotEqual(t, testimg.Digest(t, img, mib), head, "the source's first MiB is on the device")
	assert.Equal(t, testimg.Digest(t, zeros, -1), head, "the first MiB is not zeros")
}

// mibAt is the n-th MiB of path.
func mibAt(t *testing.T, path string, n int64) []byte {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, mib)
	_, err = f.ReadAt(b, n*mib)
	require.NoError(t, err)
	return b
}

// TestSnappyCloneHeldToItsAnnouncedSize: CDI's block stream with our size
// header is refused when it passes or falls short of that size, and
// nothing is committed.
func TestSnappyCloneHeldToItsAnnouncedSize(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	p := newPKI(t)
	for _, tc := range []struct {
		name      string
		announced int
		says      string
	}{
		{"longer than announced", len(data) - 1, "passes its announced"},
		{"shorter than announced", len(data) + 1, "ends at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "disk.img")
			s := startServer(t, p, importer.Options{Target: dst})
			var body bytes.Buffer
			sw := s2.NewWriter(&body, s2.WriterSnappyCompat())
			_, err := sw.Write(data)
			require.NoError(t, err)
			require.NoError(t, sw.Close())
			req, err := http.NewRequest(http.MethodPost, s.url(""), &body)
			require.NoError(t, err)
			req.Header.Set(uploadserver.HeaderContentType, cloner.ContentTypeBlock)
			req.Header.Set(cloner.SizeHeader, strconv.Itoa(tc.announced))
			resp, err := p.clientFor(t, &p.client).Do(req)
			require.NoError(t, err)
			text := new(bytes.Buffer)
			_, _ = text.ReadFrom(resp.Body)
			resp.Body.Close()
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode, text.String())
			assert.Contains(t, text.String(), tc.says)
			assert.NoFileExists(t, dst)
		})
	}
}

package uploadserver_test

import (
	"bytes"
	"io"
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
	"github.com/diskimport/engine/internal/delta"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/uploadserver"
)

// TestFilesystemDeltaSignatureRequestRefusesAManifestOutOfTheVolume: a
// filesystem pass's signature request whose manifest names a path out of
// the volume (a climbing path, a symlink pointing out) is answered 400
// as unsafe, and nothing is made in the target's directory or beside it.
func TestFilesystemDeltaSignatureRequestRefusesAManifestOutOfTheVolume(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "volume")
	require.NoError(t, os.Mkdir(dir, 0o755))
	_, url := serve(t, uploadserver.Options{Import: importer.Options{Target: filepath.Join(dir, "disk.img")}})
	for _, m := range []*delta.Manifest{
		{Entries: []delta.Entry{{Path: "../escaped", Kind: delta.KindFile, Mode: 0o644, Size: 4096}}},
		{Entries: []delta.Entry{{Path: "l", Kind: delta.KindSymlink, Link: "../../etc"}}},
	} {
		layout, err := m.LayOut()
		require.NoError(t, err)
		status, text := askTreeSignature(t, url, m, layout.Size)
		assert.Equal(t, http.StatusBadRequest, status, text)
		assert.Contains(t, text, "unsafe image")
	}
	for _, d := range []string{dir, parent} {
		entries, err := os.ReadDir(d)
		require.NoError(t, err)
		names := []string{}
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if d == parent {
			assert.Equal(t, []string{"volume"}, names)
		} else {
			assert.Empty(t, names)
		}
	}
}

// askTreeSignature posts a filesystem pass's signature request of a
// source of size bytes with m as its manifest; it returns the answer's
// status and text.
func askTreeSignature(t *testing.T, url string, m *delta.Manifest, size int64) (int, string) {
	t.Helper()
	var body bytes.Buffer
	sw := s2.NewWriter(&body)
	_, err := m.WriteTo(sw)
	require.NoError(t, err)
	require.NoError(t, sw.Close())
	req, err := http.NewRequest(http.MethodPost, url+uploadserver.PathUpload, &body)
	require.NoError(t, err)
	req.Header.Set(uploadserver.HeaderContentType, uploadserver.ContentTypeFilesystemClone)
	req.Header.Set(cloner.ProtocolHeader, cloner.ProtocolSparseV2)
	req.Header.Set(cloner.SessionHeader, "0123456789abcdef")
	req.Header.Set(cloner.DeltaHeader, cloner.DeltaSignature)
	req.Header.Set(cloner.SizeHeader, strconv.FormatInt(size, 10))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(text)
}

// TestFilesystemDeltaSignatureRequestRefusesFileSizesWhoseSumWraps: a
// sender whose manifest lists four files of 2^62 bytes (their layout
// sums to 0, the size it announces) onto a volume on a tmpfs (which takes
// files of 2^62 bytes) is answered 400 as invalid; the server lives on,
// idle, and nothing is made in the volume. Before the sizes were summed
// with overflow checks, the layout of 0 bytes passed the capacity check,
// four 2^62-byte files were staged and ZeroSignature(2^62) panicked: the
// test binary died (checked).
func TestFilesystemDeltaSignatureRequestRefusesFileSizesWhoseSumWraps(t *testing.T) {
	dir := testimg.Tmpfs(t, 64<<20)
	h, url := serve(t, uploadserver.Options{Import: importer.Options{Target: filepath.Join(dir, "disk.img")}})
	var entries []delta.Entry
	for _, name := range []string{"a", "b", "c", "d"} {
		entries = append(entries, delta.Entry{Path: name, Kind: delta.KindFile, Mode: 0o644, Size: 1 << 62})
	}
	status, text := askTreeSignature(t, url, &delta.Manifest{Entries: entries}, 0)
	assert.Equal(t, http.StatusBadRequest, status, text)
	assert.Contains(t, text, "invalid image")
	assert.Contains(t, text, "passes 9223372036854775807 bytes")
	assert.Empty(t, testimg.DirNames(t, dir))
	assert.Equal(t, "Idle", h.Status().Phase)
}

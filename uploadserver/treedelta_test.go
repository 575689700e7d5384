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
		req.Header.Set(cloner.SizeHeader, strconv.FormatInt(m.LayOut().Size, 10))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		text, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, string(text))
		assert.Contains(t, string(text), "unsafe image")
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

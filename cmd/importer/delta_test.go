package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

func TestCLIDeltaPassReportsWhatItSent(t *testing.T) {
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "src.raw", 4<<20, 51)
	dest := filepath.Join(dir, "dest.img")
	code, stdout, _ := runCLI(t, nil, env(nil), "--delta", "--json", src, dest)
	require.Equal(t, cdi.ExitOK, code)
	first := decode(t, []byte(stdout))
	assert.Nil(t, first.Delta, "no base: a full clone")

	f, err := os.OpenFile(src, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("changed"), 3<<20)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	code, stdout, stderr := runCLI(t, nil, env(nil), "--delta", "--delta-base", first.ContentDigest, "--json", src, dest)
	require.Equal(t, cdi.ExitOK, code, stderr)
	m := decode(t, []byte(stdout))
	require.NotNil(t, m.Delta, stdout)
	assert.EqualValues(t, 1, m.Delta.BlocksChanged)
	assert.EqualValues(t, 64<<10, m.Delta.DataBytes)
	assert.True(t, m.Delta.Final)
	assert.Equal(t, first.ContentDigest, m.Delta.BaseDigest)
	assert.Equal(t, testimg.Digest(t, src, -1), testimg.Digest(t, dest, -1))

	code, _, stderr = runCLI(t, nil, env(nil), "--delta", src, dest)
	require.Equal(t, cdi.ExitOK, code)
	assert.Contains(t, stderr, "Delta pass complete: "+dest)
	assert.Contains(t, stderr, "0 of 64 blocks changed")
	assert.Contains(t, stderr, "final")
}

// TestCLICloneSourceDeltaOfAFilesystemVolume: clone-source -delta of a
// mounted filesystem volume to upload-server onto a directory, twice: the
// second pass, after a write into disk.img, sends its changed block (the
// unchanged small file is kept), names the first pass's digest as its
// base, and leaves the directory holding the source's files.
func TestCLICloneSourceDeltaOfAFilesystemVolume(t *testing.T) {
	src := t.TempDir()
	testimg.Raw(t, src, "disk.img", 8<<20, 52)
	require.NoError(t, os.WriteFile(filepath.Join(src, "notes"), []byte("a small file"), 0o644))
	dst := t.TempDir()
	pass := func(base string) cloneSourceJSON {
		addr := freeAddr(t)
		done := runAsync(t, env(nil), "upload-server", "-q", "--listen", addr, filepath.Join(dst, "disk.img"))
		waitHealthy(t, http.DefaultClient, "http://"+addr)
		args := []string{"clone-source", "-delta", "-json", "-content-type", "filesystem-clone", "-mount", src, "-url", "http://" + addr + "/v1beta1/upload"}
		if base != "" {
			args = append(args, "-delta-base", base)
		}
		code, stdout, stderr := runCLI(t, nil, env(nil), args...)
		require.Equal(t, cdi.ExitOK, code, stderr)
		require.Equal(t, cdi.ExitOK, waitExit(t, done))
		var out cloneSourceJSON
		require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
		require.NotNil(t, out.Delta, stdout)
		return out
	}
	first := pass("")
	assert.Equal(t, "sparse-v2+delta-v1+tree", first.Protocol)
	testimg.WriteRandomAt(t, filepath.Join(src, "disk.img"), 53, 4096, 5<<20)
	second := pass(first.Digest)
	assert.EqualValues(t, 1, second.Delta.BlocksChanged, "disk.img's changed block; the small file, unchanged, kept")
	assert.Equal(t, first.Digest, second.Delta.BaseDigest)
	assert.True(t, second.Delta.Final)
	for _, name := range []string{"disk.img", "notes"} {
		assert.Equal(t, testimg.FileDigest(t, filepath.Join(src, name)), testimg.FileDigest(t, filepath.Join(dst, name)), name)
	}
}

// cloneSourceJSON is clone-source's -json output.
type cloneSourceJSON struct {
	Protocol  string              `json:"protocol"`
	WireBytes int64               `json:"wireBytes"`
	Digest    string              `json:"digest"`
	Delta     *importer.DeltaPass `json:"delta"`
}

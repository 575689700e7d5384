package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/internal/testkit/testtar"
)

// On the command line each source that is not a disk image fails with
// exit 1, its own reason in the JSON and the cause on stderr, and no DEST;
// --format-in raw imports the same bytes as they are.
func TestCLIRefusesWhatIsNotADiskImage(t *testing.T) {
	testimg.Need(t, "bzip2")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 1<<20, 31)
	disk, err := os.ReadFile(raw)
	require.NoError(t, err)
	bz, err := exec.Command("bzip2", "-c", raw).Output()
	require.NoError(t, err)
	zb := testimg.Zip(t, "disk.raw", disk)
	files := map[string][]byte{
		"login.html":   []byte("<html><head><title>Sign in</title></head><body><form>user</form></body></html>\n"),
		"disk.raw.bz2": bz,
		"disk.zip":     zb,
		"empty.tar":    testtar.Build(t, []testtar.Member{testtar.File("README", []byte("see the web page\n"))}),
		"two.tar":      testtar.Build(t, []testtar.Member{testtar.File("a.img", disk), testtar.File("b.img", disk)}),
	}
	for name, b := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if filepath.Ext(r.URL.Path) == ".html" {
			w.Header().Set("Content-Type", "text/html")
		}
		http.ServeFile(w, r, filepath.Join(dir, filepath.Base(r.URL.Path)))
	}))
	t.Cleanup(srv.Close)

	cases := []struct{ file, reason, stderr string }{
		{"login.html", "TextNotImage", "the server returned a text page (Content-Type text/html), not a disk image"},
		{"disk.raw.bz2", "UnsupportedCompression", "a bzip2 file, not a disk image (decompress it first)"},
		{"disk.zip", "ArchiveNotImage", "a zip archive, not a disk image"},
		{"empty.tar", "NoDiskInArchive", "a tar archive holding no disk image (it holds README)"},
		{"two.tar", "SeveralDisksInArchive", "more than one disk image (a.img, b.img)"},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "disk.img")
			code, stdout, stderr := runCLI(t, nil, env(nil), "--json", srv.URL+"/"+c.file, dest)
			assert.Equal(t, cdi.ExitFailed, code)
			m := decode(t, []byte(stdout))
			assert.Equal(t, c.reason, m.Reason)
			assert.NotContains(t, m.Message, cdi.MessageComplete)
			assert.Contains(t, stderr, c.stderr)
			if c.reason == "TextNotImage" {
				assert.Contains(t, stderr, "; --format-in raw imports it as a raw disk anyway\n", "the command line's way out")
			}
			assert.NoFileExists(t, dest)

			code, _, _ = runCLI(t, nil, env(nil), "--format-in", "raw", srv.URL+"/"+c.file, dest)
			require.Equal(t, cdi.ExitOK, code)
			got, err := os.ReadFile(dest)
			require.NoError(t, err)
			assert.Equal(t, files[c.file], got[:len(files[c.file])])
		})
	}
	t.Run("standard input", func(t *testing.T) {
		dest := filepath.Join(t.TempDir(), "disk.img")
		code, _, stderr := runCLI(t, files["login.html"], env(nil), "-", dest)
		assert.Equal(t, cdi.ExitFailed, code)
		assert.Contains(t, stderr, "the source is text, not a disk image")
		assert.NoFileExists(t, dest)
	})
	// Env mode has no --format-in (CDI has no such setting): its
	// termination message names the cause and no switch.
	t.Run("env mode", func(t *testing.T) {
		root := cdiRoot(t)
		code, _, _ := runCLI(t, nil, env(map[string]string{
			"IMPORTER_SOURCE":      "http",
			"IMPORTER_ENDPOINT":    srv.URL + "/login.html",
			"IMPORTER_IMAGE_SIZE":  "64Mi",
			"IMPORTER_PATH_PREFIX": root,
		}))
		assert.Equal(t, cdi.ExitFailed, code)
		b, err := os.ReadFile(filepath.Join(root, "dev/termination-log"))
		require.NoError(t, err)
		assert.Contains(t, string(b), "the server returned a text page", "CDI's failure message, in its words")
		assert.NotContains(t, string(b), "--format-in")
	})
}

// A disk in a gzipped tar imports as that disk, and the summary names the
// layers as its file name would: raw.tar.gz.
func TestCLIImportsTheDiskOfATarGz(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 1<<20, 32)
	disk, err := os.ReadFile(raw)
	require.NoError(t, err)
	src := testimg.Compress(t, testtar.Write(t, dir, "image.tar", []testtar.Member{testtar.File("disk.raw", disk)}), "gz")
	dest := filepath.Join(t.TempDir(), "disk.img")
	code, _, stderr := runCLI(t, nil, env(nil), src, dest)
	require.Equal(t, cdi.ExitOK, code)
	assert.Contains(t, stderr, "(raw.tar.gz, ")
	got, err := os.ReadFile(dest)
	require.NoError(t, err)
	assert.Equal(t, disk, got)
}

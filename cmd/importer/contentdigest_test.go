package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

func TestDigestContentPrintsOneDigestForOneDiskAndImportsCheckIt(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 3<<20, 5)
	qx := testimg.Compress(t, testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2"), "xz")
	code, out, _ := runCLI(t, nil, env(nil), "digest", "--content", raw)
	require.Equal(t, cdi.ExitOK, code)
	d := strings.TrimSpace(out)
	assert.True(t, strings.HasPrefix(d, "blk-sha256:"), d)
	if blksum, err := exec.LookPath("blksum"); err == nil {
		b, err := exec.Command(blksum, raw).Output()
		require.NoError(t, err)
		assert.Equal(t, "blk-sha256:"+strings.Fields(string(b))[0], d, "blksum 0.10.1's digest")
	}
	code, out, _ = runCLI(t, nil, env(nil), "digest", "--content", qx)
	require.Equal(t, cdi.ExitOK, code)
	assert.Equal(t, d, strings.TrimSpace(out))
	qb, err := os.ReadFile(qx)
	require.NoError(t, err)
	code, out, _ = runCLI(t, qb, env(nil), "digest", "--content", "-")
	require.Equal(t, cdi.ExitOK, code)
	assert.Equal(t, d, strings.TrimSpace(out), "from standard input")

	dest := filepath.Join(t.TempDir(), "disk.img")
	code, out, _ = runCLI(t, nil, env(nil), "--json", "-q", "--expect-content-digest", d, qx, dest)
	require.Equal(t, cdi.ExitOK, code)
	assert.Equal(t, d, decode(t, []byte(out)).ContentDigest)
	wrong := "blk-sha256:" + strings.Repeat("0", 64)
	code, out, _ = runCLI(t, nil, env(nil), "--json", "-q", "--expect-content-digest", wrong, qx, dest+"2")
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Equal(t, "ChecksumMismatch", decode(t, []byte(out)).Reason)
	_, err = os.Stat(dest + "2")
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestEnvContentDigestInTheTerminationMessageAndChecked(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 4<<20, 6)
	xz := testimg.Compress(t, testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2"), "xz")
	base := testimg.Serve(t, dir)
	code, out, _ := runCLI(t, nil, env(nil), "digest", "--content", raw)
	require.Equal(t, cdi.ExitOK, code)
	want := strings.TrimSpace(out)
	for _, c := range []struct {
		expect string
		ok     bool
	}{{"", true}, {want, true}, {"blk-sha256:" + strings.Repeat("1", 64), false}} {
		root := cdiRoot(t)
		code, _, _ := runCLI(t, nil, env(map[string]string{
			"IMPORTER_SOURCE":         "http",
			"IMPORTER_ENDPOINT":       base + filepath.Base(xz),
			"IMPORTER_IMAGE_SIZE":     "64Mi",
			"IMPORTER_CONTENT_DIGEST": c.expect,
			"IMPORTER_PATH_PREFIX":    root,
		}))
		assert.Equal(t, cdi.ExitOK, code, "a mismatch exits 0 like a checksum mismatch: the controller reads the message")
		b, err := os.ReadFile(filepath.Join(root, "dev/termination-log"))
		require.NoError(t, err)
		m := decode(t, b)
		assert.Equal(t, want, m.ContentDigest, "the image's digest, not the grown volume's")
		_, err = os.Stat(filepath.Join(root, "data/disk.img"))
		if c.ok {
			assert.Equal(t, "Import Complete", m.Message)
			assert.NoError(t, err)
		} else {
			assert.Equal(t, "ChecksumMismatch", m.Reason)
			assert.ErrorIs(t, err, os.ErrNotExist)
		}
	}
}

// TestDigestOfAFileNamesDigestContent: `digest` is given a file where a
// registry reference belongs; the refusal names the command the user
// likely meant (before, it named only the transports).
func TestDigestOfAFileNamesDigestContent(t *testing.T) {
	raw := testimg.Raw(t, t.TempDir(), "disk.raw", 1<<20, 7)
	code, _, stderr := runCLI(t, nil, env(nil), "digest", raw)
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "importer digest --content "+raw)
}

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/cdi"
	"github.com/diskimport/engine/internal/testimg"
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

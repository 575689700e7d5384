package main

import (
	"bytes"
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

func TestCLIBlankRawAndQCOW2(t *testing.T) {
	dir := t.TempDir()
	raw := filepath.Join(dir, "blank.img")
	code, stdout, _ := runCLI(t, nil, env(nil), "blank", "--size", "64Mi", "--filesystem-overhead", "0.06", "--json", raw)
	require.Equal(t, cdi.ExitOK, code)
	m := decode(t, []byte(stdout))
	assert.Equal(t, "Import Complete", m.Message)
	assert.EqualValues(t, 60<<20, m.VirtualSize)
	st, err := os.Stat(raw)
	require.NoError(t, err)
	assert.EqualValues(t, 60<<20, st.Size())
	assert.Less(t, testimg.Allocated(t, raw), int64(1<<20), "sparse")
	testimg.AssertZeros(t, raw, 0, 60<<20)

	testimg.Need(t, "qemu-img")
	q := filepath.Join(dir, "blank.qcow2")
	code, _, _ = runCLI(t, nil, env(nil), "blank", "--size", "32Mi", "--format", "qcow2", q)
	require.Equal(t, cdi.ExitOK, code)
	out, err := exec.Command("qemu-img", "info", "-f", "qcow2", q).Output()
	require.NoError(t, err)
	assert.Contains(t, string(out), "virtual size: 32 MiB")

	code, _, stderr := runCLI(t, nil, env(nil), "blank", filepath.Join(dir, "nosize.img"))
	assert.Equal(t, cdi.ExitUsage, code)
	assert.Contains(t, stderr, "size is required")
}

func TestCLIBlankBlockPreallocation(t *testing.T) {
	dir := t.TempDir()
	dev := testimg.LoopDevice(t, dir, 4<<20)
	// Without --preallocation the device is left alone.
	code, _, _ := runCLI(t, nil, env(nil), "blank", dev)
	require.Equal(t, cdi.ExitOK, code)
	b, err := os.ReadFile(dev)
	require.NoError(t, err)
	assert.Equal(t, bytes.Repeat([]byte{0xA5}, 4<<20), b)

	code, stdout, _ := runCLI(t, nil, env(nil), "blank", "--preallocation", "--json", dev)
	require.Equal(t, cdi.ExitOK, code)
	assert.True(t, decode(t, []byte(stdout)).PreallocationApplied)
	testimg.AssertZeros(t, dev, 0, 4<<20)
}

func TestEnvBlankFileAndBlock(t *testing.T) {
	root := cdiRoot(t)
	code, _, _ := runCLI(t, nil, env(map[string]string{
		"IMPORTER_SOURCE":      "none",
		"IMPORTER_IMAGE_SIZE":  "64Mi",
		"FILESYSTEM_OVERHEAD":  "0.06",
		"IMPORTER_PATH_PREFIX": root,
	}))
	require.Equal(t, cdi.ExitOK, code)
	img := filepath.Join(root, "data/disk.img")
	st, err := os.Stat(img)
	require.NoError(t, err)
	assert.EqualValues(t, 60<<20, st.Size())
	b, err := os.ReadFile(filepath.Join(root, "dev/termination-log"))
	require.NoError(t, err)
	assert.Equal(t, "Import Complete", decode(t, b).Message)

	dir := t.TempDir()
	data := testimg.Raw(t, dir, "data.raw", 4<<20, 51)
	loop := testimg.LoopDevice(t, dir, 4<<20)
	testimg.WriteDevice(t, loop, data)
	root = cdiRoot(t)
	require.NoError(t, os.Symlink(loop, filepath.Join(root, "dev/cdi-block-volume")))
	code, _, _ = runCLI(t, nil, env(map[string]string{
		"IMPORTER_SOURCE":      "none",
		"IMPORTER_IMAGE_SIZE":  "4Mi",
		"PREALLOCATION":        "true",
		"IMPORTER_PATH_PREFIX": root,
	}))
	require.Equal(t, cdi.ExitOK, code)
	testimg.AssertZeros(t, loop, 0, 4<<20)
	b, err = os.ReadFile(filepath.Join(root, "dev/termination-log"))
	require.NoError(t, err)
	assert.True(t, decode(t, b).PreallocationApplied)
	_, err = os.Stat(filepath.Join(root, "data/disk.img"))
	assert.True(t, os.IsNotExist(err), "block mode must not write /data/disk.img")
}

func TestCLICloneExactVerify(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "src.raw", 4<<20, 52)
	src := testimg.LoopDevice(t, dir, 4<<20)
	testimg.WriteDevice(t, src, raw)
	dst := testimg.LoopDevice(t, dir, 4<<20)
	code, stdout, _ := runCLI(t, nil, env(nil), "--exact-size", "--verify", "--zero-target", "--json", src, dst)
	require.Equal(t, cdi.ExitOK, code)
	m := decode(t, []byte(stdout))
	want := "sha256:" + testimg.Digest(t, raw, -1)
	assert.True(t, m.Verified)
	assert.Equal(t, want, m.SourceDigest)
	assert.Equal(t, want, m.TargetDigest)
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, dst, -1))

	// A larger file source with --exact-size: refused as bad usage, DEST untouched.
	big := testimg.Raw(t, dir, "big.raw", 2<<20, 53)
	require.NoError(t, os.Truncate(big, 3<<20))
	code, _, stderr := runCLI(t, nil, env(nil), "--exact-size", big, dst)
	assert.Equal(t, cdi.ExitUsage, code)
	assert.Contains(t, stderr, "exact size")
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, dst, -1))
}

func TestEnvClone(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "src.raw", 4<<20, 54)
	root := cdiRoot(t)
	code, _, _ := runCLI(t, nil, env(map[string]string{
		"IMPORTER_SOURCE":      "clone",
		"IMPORTER_ENDPOINT":    raw,
		"IMPORTER_VERIFY":      "true",
		"IMPORTER_EXACT_SIZE":  "true",
		"IMPORTER_PATH_PREFIX": root,
	}))
	require.Equal(t, cdi.ExitOK, code)
	img := filepath.Join(root, "data/disk.img")
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, img, -1))
	b, err := os.ReadFile(filepath.Join(root, "dev/termination-log"))
	require.NoError(t, err)
	m := decode(t, b)
	assert.True(t, m.Verified)
	assert.Equal(t, "sha256:"+testimg.Digest(t, raw, -1), m.TargetDigest)

	// A URL is not a clone source.
	code, _, stderr := runCLI(t, nil, env(map[string]string{
		"IMPORTER_SOURCE":      "clone",
		"IMPORTER_ENDPOINT":    "http://127.0.0.1:1/disk.img",
		"IMPORTER_PATH_PREFIX": cdiRoot(t),
	}))
	assert.Equal(t, cdi.ExitFailed, code)
	assert.True(t, strings.Contains(stderr, "absolute path"), stderr)
}

// TestCLIBlankHonoursTheUmaskAndMode: a blank file DEST gets 0666 less the
// umask, as an import's, or --mode (it got 0660 whatever the umask, and
// took no --mode).
func TestCLIBlankHonoursTheUmaskAndMode(t *testing.T) {
	dir := t.TempDir()
	plain, private := filepath.Join(dir, "plain.img"), filepath.Join(dir, "private.img")
	code, _, _ := runCLI(t, nil, env(nil), "blank", "--size", "16Mi", plain)
	require.Equal(t, cdi.ExitOK, code)
	code, _, _ = runCLI(t, nil, env(nil), "blank", "--size", "16Mi", "--mode", "0600", private)
	require.Equal(t, cdi.ExitOK, code)
	for path, want := range map[string]os.FileMode{plain: 0o666 &^ currentUmask(), private: 0o600} {
		fi, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, want, fi.Mode().Perm(), path)
	}
	code, _, stderr := runCLI(t, nil, env(nil), "blank", "--size", "16Mi", "--mode", "9", filepath.Join(dir, "bad.img"))
	assert.Equal(t, cdi.ExitUsage, code)
	assert.Contains(t, stderr, "--mode")
}

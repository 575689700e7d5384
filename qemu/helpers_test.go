package qemu

import (
	"bytes"
	"crypto/sha256"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskimport/engine/internal/sandbox"
	"github.com/stretchr/testify/require"
)

// requireTools skips when the real tools are missing: these tests never mock.
func requireTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"qemu-img"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: %v", tool, err)
		}
	}
}

// requireLandlock skips tests of the confinement itself on kernels
// without Landlock (everything else runs there with limits only).
func requireLandlock(t *testing.T) {
	t.Helper()
	if sandbox.ABI() == 0 {
		t.Skip("the kernel has no Landlock")
	}
}

const rawSize = 4 << 20

// makeQCOW2 writes makeRaw's disk in a new directory and converts it with
// qemu-img to the qcow2 name there.
func makeQCOW2(t *testing.T, name string) (dir, raw, qcow2 string, data []byte) {
	t.Helper()
	dir = t.TempDir()
	raw, data = makeRaw(t, dir)
	qcow2 = filepath.Join(dir, name)
	qemuImg(t, "convert", "-q", "-f", "raw", "-O", "qcow2", raw, qcow2)
	return dir, raw, qcow2, data
}

// makeRaw writes a 4 MiB raw disk of varied, known content: random blocks,
// text, a zero hole (sparse) and random bytes at the very end. It returns
// the path and the content.
func makeRaw(t *testing.T, dir string) (string, []byte) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, rawSize)
	for i := 0; i < 1<<20; i++ { // first MiB random
		data[i] = byte(rng.Uint32())
	}
	text := []byte(strings.Repeat("The quick brown fox jumps over the lazy dog. 0123456789\n", 1000))
	copy(data[1<<20:], text) // text at 1 MiB
	// 2 MiB .. 3.5 MiB stays zero (hole)
	for i := rawSize - (512 << 10); i < rawSize; i++ { // last 512 KiB random
		data[i] = byte(rng.Uint32())
	}
	p := filepath.Join(dir, "disk.raw")
	f, err := os.Create(p)
	require.NoError(t, err)
	defer f.Close()
	// Write around the hole so the file is really sparse there.
	_, err = f.WriteAt(data[:2<<20], 0)
	require.NoError(t, err)
	_, err = f.WriteAt(data[rawSize-(512<<10):], rawSize-(512<<10))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(rawSize))
	return p, data
}

// qemuImg runs qemu-img directly to build fixtures.
func qemuImg(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("qemu-img", args...).CombinedOutput()
	require.NoError(t, err, "qemu-img %v: %s", args, out)
}

func requireSameContent(t *testing.T, want []byte, path string) {
	t.Helper()
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, len(want), len(got), "size of %s", path)
	if !bytes.Equal(want, got) {
		t.Fatalf("content of %s differs: sha256 %x, want %x", path, sha256.Sum256(got), sha256.Sum256(want))
	}
}

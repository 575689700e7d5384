//go:build linux

package volume_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/internal/testkit/testimg"
)

const mib = 1 << 20

// makeImage builds a raw image of the given length from a recipe that cycles
// through random blocks, text, and zero holes of varied (often unaligned)
// sizes, so every code path (data runs, zero runs, granule splits, chunk
// boundaries, held-back head) is exercised.
func makeImage(seed uint64, length int, zeroShare float64) []byte {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	img := make([]byte, length)
	text := []byte(strings.Repeat("the quick brown fox jumps over the lazy dog 0123456789\n", 64))
	for off := 0; off < length; {
		n := min(length-off, 4096+rng.IntN(3*mib))
		switch r := rng.Float64(); {
		case r < zeroShare: // zero hole: leave as is
		case r < zeroShare+(1-zeroShare)/2:
			for i := off; i < off+n; i += 8 {
				v := rng.Uint64()
				for k := 0; k < 8 && i+k < off+n; k++ {
					img[i+k] = byte(v >> (8 * k))
				}
			}
		default:
			for i := off; i < off+n; i += len(text) {
				copy(img[i:off+n], text)
			}
		}
		off += n
	}
	// Make sure the very first and last bytes are data (boot sector, odd tail).
	copy(img, []byte("BOOTSECTOR"))
	if length > 16 {
		copy(img[length-7:], []byte("TAILEND"))
	}
	return img
}

// onlyReader hides bytes.Reader's WriteTo so io.Copy uses Writer.ReadFrom.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for loop devices")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("losetup not installed")
	}
}

// newLoop attaches a loop device (direct I/O) over a sparse backing file of
// size bytes filled with fill (nil = left sparse, reads zeros) and detaches
// it in Cleanup.
func newLoop(t testing.TB, size int64, fill func(f *os.File), extra ...string) string {
	t.Helper()
	needRoot(t)
	backing := filepath.Join(t.TempDir(), "backing.img")
	f, err := os.Create(backing)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))
	if fill != nil {
		fill(f)
	}
	require.NoError(t, f.Close())
	return testimg.AttachLoop(t, backing, append([]string{"--direct-io=on"}, extra...)...)
}

// fillRandom writes pseudo-random "old tenant" data over the whole file.
func fillRandom(seed uint64) func(f *os.File) {
	return func(f *os.File) {
		fi, _ := f.Stat()
		rng := rand.New(rand.NewPCG(seed, 1))
		buf := make([]byte, mib)
		for off := int64(0); off < fi.Size(); off += mib {
			for i := 0; i < len(buf); i += 8 {
				v := rng.Uint64()
				for k := range 8 {
					buf[i+k] = byte(v>>(8*k)) | 1 // never zero
				}
			}
			n := min(int64(len(buf)), fi.Size()-off)
			if _, err := f.WriteAt(buf[:n], off); err != nil {
				panic(err)
			}
		}
	}
}

// readDev reads n bytes at off from a block device after dropping its page
// cache, so the test sees what reached the device.
func readDev(t testing.TB, dev string, off, n int64) []byte {
	t.Helper()
	f, err := os.Open(dev)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, unix.IoctlSetInt(int(f.Fd()), unix.BLKFLSBUF, 0))
	buf := make([]byte, n)
	_, err = f.ReadAt(buf, off)
	require.NoError(t, err)
	return buf
}

// requireSameBytes compares without dumping megabytes on failure.
func requireSameBytes(t testing.TB, want, got []byte) {
	t.Helper()
	require.Equal(t, len(want), len(got), "length")
	if !bytes.Equal(want, got) {
		for i := range want {
			if want[i] != got[i] {
				require.FailNow(t, fmt.Sprintf("content differs first at offset %d (want %#x, got %#x)", i, want[i], got[i]))
			}
		}
	}
}

// requireFileHolds checks that the file at path holds exactly want.
func requireFileHolds(t testing.TB, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	requireSameBytes(t, want, got)
}

// requireImageOver checks that the device dev, which held before, holds
// img at its start and before's bytes past it, untouched.
func requireImageOver(t testing.TB, dev string, img, before []byte) {
	t.Helper()
	got := readDev(t, dev, 0, int64(len(before)))
	requireSameBytes(t, img, got[:len(img)])
	requireSameBytes(t, before[len(img):], got[len(img):])
}

// Package testimg builds test disk images at test time: a raw file of known,
// varied content (random blocks, text, zero holes), converted with the real
// qemu-img and compressed with the real gzip/xz/zstd tools. Tests compare
// what the engine wrote with the raw file byte for byte. It also serves
// images over HTTP on 127.0.0.1 and provides what tests write them onto:
// loop devices, a tmpfs, and the file-and-device matrix of ForEachTarget.
package testimg

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// Raw writes a raw image of size bytes (a multiple of 512) to dir/name:
// random blocks, repeated text, and zero holes, seeded so runs repeat.
func Raw(t testing.TB, dir, name string, size int64, seed uint64) string {
	t.Helper()
	const block = 64 << 10
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	buf := make([]byte, size)
	text := []byte("The quick brown fox jumps over the lazy dog. 0123456789\n")
	for off := int64(0); off < size; off += block {
		end := min(off+block, size)
		switch (off / block) % 5 {
		case 0, 3:
			for i := off; i < end; i += 8 {
				v := rng.Uint64()
				for k := int64(0); k < 8 && i+k < end; k++ {
					buf[i+k] = byte(v >> (8 * k))
				}
			}
		case 1:
			for i := off; i < end; i += int64(len(text)) {
				copy(buf[i:end], text)
			}
		default:
			// zeros: a hole
		}
	}
	// A few non-zero bytes at the very end so truncation is visible.
	copy(buf[size-16:], "END-OF-TEST-DISK")
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// RandomBytes returns n pseudo-random bytes, the same for the same seed.
func RandomBytes(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := rng.Uint64()
		for k := 0; k < 8 && i+k < n; k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	return b
}

// Run runs a command and fails the test with its output on error.
func Run(t testing.TB, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// Need skips the test when a tool is missing.
func Need(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: %v", tool, err)
		}
	}
}

// Convert makes dst from the raw file with qemu-img convert -O fmt plus
// options (e.g. "subformat=streamOptimized").
func Convert(t testing.TB, raw, dst, fmt string, opts ...string) string {
	t.Helper()
	args := []string{"convert", "-q", "-f", "raw", "-O", fmt}
	if len(opts) > 0 {
		args = append(args, "-o", strings.Join(opts, ","))
	}
	Run(t, "qemu-img", append(args, raw, dst)...)
	return dst
}

// RawAndQCOW2 writes dir/disk.raw (Raw's size and seed) and its qcow2
// conversion dir/disk.qcow2, and returns both paths.
func RawAndQCOW2(t testing.TB, dir string, size int64, seed uint64) (raw, qcow2 string) {
	t.Helper()
	raw = Raw(t, dir, "disk.raw", size, seed)
	return raw, Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2")
}

// FileSize is the size of the file at path.
func FileSize(t testing.TB, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// Compress compresses path with the named tool (gz, xz, zst) keeping the
// original, and returns the new file's path.
func Compress(t testing.TB, path, kind string) string {
	t.Helper()
	switch kind {
	case "gz":
		out, err := exec.Command("gzip", "-c", "-1", path).Output()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path+".gz", out, 0o644); err != nil {
			t.Fatal(err)
		}
	case "xz":
		Run(t, "xz", "-k", "-f", "-1", "-T2", "--block-size=1MiB", path)
	case "zst":
		Run(t, "zstd", "-q", "-f", "-1", path, "-o", path+".zst")
	default:
		t.Fatalf("unknown compression %q", kind)
	}
	return path + "." + kind
}

// Digest returns the sha256 of the first n bytes of path (all of it when n < 0).
func Digest(t testing.TB, path string, n int64) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	var r io.Reader = f
	if n >= 0 {
		r = io.LimitReader(f, n)
	}
	if _, err := io.Copy(h, r); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// FileDigest returns "sha256:<hex>" of a whole file, for --checksum.
func FileDigest(t testing.TB, path string) string {
	return "sha256:" + Digest(t, path, -1)
}

// DirNames lists the names in dir (nil for an empty one), for tests that
// check what an import left behind.
func DirNames(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// Logger sends the engine's log lines, debug ones too, to the test's
// output, so a failing case shows its phases.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// RealImages is the shared corpus of public projects' images beside the
// repository (shared/real-images/PROJECT/NAME.xz); it may be absent.
func RealImages() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "shared", "real-images")
}

// SharedImage decompresses the corpus image rel (RealImages()/rel.xz) into
// dir and returns its path, skipping the test when the corpus is absent.
func SharedImage(t testing.TB, dir, rel string) string {
	t.Helper()
	src := filepath.Join(RealImages(), rel+".xz")
	if _, err := os.Stat(src); err != nil {
		t.Skipf("shared real images not available: %v", err)
	}
	out, err := exec.Command("xz", "-dc", src).Output()
	if err != nil {
		t.Fatalf("xz -dc %s: %v", src, err)
	}
	p := filepath.Join(dir, filepath.Base(rel))
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// SharedImageBytes is the corpus image rel, decompressed, skipping the
// test when the corpus is absent.
func SharedImageBytes(t testing.TB, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(SharedImage(t, t.TempDir(), rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Zip is a zip archive of one member, name, holding content.
func Zip(t testing.TB, name string, content []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.Create(name)
	if err == nil {
		_, err = w.Write(content)
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// AssertZeros fails unless path holds only zero bytes in [off, off+n).
func AssertZeros(t testing.TB, path string, off, n int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for n > 0 {
		k, err := f.ReadAt(buf[:min(int64(len(buf)), n)], off)
		if k == 0 && err != nil {
			t.Fatalf("reading %s at %d: %v", path, off, err)
		}
		for i, b := range buf[:k] {
			if b != 0 {
				t.Fatalf("%s: byte at %d is %#x, want 0", path, off+int64(i), b)
			}
		}
		off += int64(k)
		n -= int64(k)
	}
}

// Allocated returns the bytes a file occupies on disk (holes excluded).
func Allocated(t testing.TB, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Blocks * 512
}

// LUKS writes a 4 MiB LUKS image to path with qemu-img. qemu 7.2's key
// derivation benchmark fails now and then on fast or busy machines
// ("Unable to get accurate CPU usage", fixed in qemu 9.2.1), so it is tried
// a few times before the test gives up.
func LUKS(t testing.TB, path string) {
	t.Helper()
	Need(t, "qemu-img")
	var out []byte
	var err error
	for range 5 {
		out, err = exec.Command("qemu-img", "create", "-q", "-f", "luks", "--object", "secret,id=s0,data=x",
			"-o", "key-secret=s0,iter-time=100", path, "4M").CombinedOutput()
		if err == nil {
			return
		}
	}
	t.Fatalf("qemu-img create -f luks %s: %v\n%s", path, err, out)
}

package format

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// needTool skips the test when a command-line tool is missing.
func needTool(tb testing.TB, name string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		tb.Skipf("%s not installed: %v", name, err)
	}
	return p
}

// run runs a command and fails the test with its output when it fails.
func run(tb testing.TB, name string, args ...string) []byte {
	tb.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	require.NoError(tb, err, "%s %v: %s", name, args, out)
	return out
}

// variedContent fills n bytes (n a multiple of 64 KiB) with a deterministic
// mix: random blocks, text, zero holes, and random data in the last block so
// an image's last clusters are really allocated.
func variedContent(n int, seed uint64) []byte {
	const chunk = 64 << 10
	b := make([]byte, n)
	rng := rand.New(rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 7}))
	for i := 0; i*chunk < n; i++ {
		c := b[i*chunk : min((i+1)*chunk, n)]
		switch {
		case (i+1)*chunk >= n, i%5 == 0, i%5 == 3:
			for j := range c {
				c[j] = byte(rng.Uint32())
			}
		case i%5 == 1:
			line := []byte{}
			for k := 0; len(line) < len(c); k++ {
				line = fmt.Appendf(line, "line %d of block %d: the quick brown fox %x\n", k, i, rng.Uint32()%97)
			}
			copy(c, line)
		default:
			// zero hole
		}
	}
	return b
}

// writeRaw writes content to dir/name, leaving zero chunks as holes.
func writeRaw(tb testing.TB, path string, content []byte) {
	tb.Helper()
	require.NoError(tb, os.WriteFile(path, content, 0o644))
}

// variedRaw writes variedContent(n, seed) to disk.raw in a new directory
// and returns the directory and the file's path.
func variedRaw(tb testing.TB, n int, seed uint64) (dir, raw string) {
	tb.Helper()
	dir = tb.TempDir()
	raw = filepath.Join(dir, "disk.raw")
	writeRaw(tb, raw, variedContent(n, seed))
	return dir, raw
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return fmt.Sprintf("%x", s)
}

// qemuVirtualSize asks qemu-img info for the virtual size.
func qemuVirtualSize(tb testing.TB, path, fmtName string) int64 {
	tb.Helper()
	out := run(tb, "qemu-img", "info", "-f", fmtName, "--output=json", path)
	var info struct {
		VirtualSize int64 `json:"virtual-size"`
	}
	require.NoError(tb, json.Unmarshal(out, &info))
	return info.VirtualSize
}

// readHead returns the first DefaultPeekSize bytes of a file (fewer when it
// is smaller).
func readHead(tb testing.TB, path string) []byte {
	tb.Helper()
	f, err := os.Open(path)
	require.NoError(tb, err)
	defer f.Close()
	b := make([]byte, DefaultPeekSize)
	n, err := io.ReadFull(f, b)
	if err != nil {
		require.ErrorIs(tb, err, io.ErrUnexpectedEOF)
	}
	return b[:n]
}

// convert makes an image of format out (qemu-img -O name, with -o options)
// from a raw file and returns its path.
func convert(tb testing.TB, raw, dir, name, outFmt string, opts ...string) string {
	tb.Helper()
	p := filepath.Join(dir, name)
	args := []string{"convert", "-f", "raw", "-O", outFmt}
	for _, o := range opts {
		args = append(args, "-o", o)
	}
	run(tb, "qemu-img", append(args, raw, p)...)
	return p
}

// compressFile runs a CLI compressor (gzip/xz/zstd) with args, reading in
// and writing out.
func compressFile(tb testing.TB, in, out string, tool string, args ...string) {
	tb.Helper()
	needTool(tb, tool)
	src, err := os.Open(in)
	require.NoError(tb, err)
	defer src.Close()
	dst, err := os.Create(out)
	require.NoError(tb, err)
	defer dst.Close()
	cmd := exec.Command(tool, append(args, "-c")...)
	var stderr strings.Builder
	cmd.Stdin, cmd.Stdout, cmd.Stderr = src, dst, &stderr
	require.NoError(tb, cmd.Run(), "%s %v: %s", tool, args, stderr.String())
}

func le32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }

func crc32IEEE(b []byte) uint32 { return crc32.ChecksumIEEE(b) }

func execLookPath(name string) (string, error) { return exec.LookPath(name) }

package streamdecode

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/diskimport/engine/format"
)

// oracleMaxDisk bounds the disks the qemu-img oracle compares: the fuzz
// seeds are 128 KiB disks, and a mutated header may claim up to 1 GiB,
// which would cost a gigabyte per input to compare.
const oracleMaxDisk = 16 << 20

// oracleSink checks every write stays inside the disk and, for a disk
// small enough to compare, keeps the guest image in memory (zero where
// nothing is written, as a plain Sink promises).
type oracleSink struct {
	size int64
	disk []byte // nil: too big to keep
}

func newOracleSink(size int64) *oracleSink {
	s := &oracleSink{size: size}
	if size >= 0 && size <= oracleMaxDisk {
		s.disk = make([]byte, size)
	}
	return s
}

func (s *oracleSink) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > s.size {
		panic(fmt.Sprintf("write of %d bytes at %d outside the %d-byte disk", len(p), off, s.size))
	}
	if s.disk != nil {
		copy(s.disk[off:], p)
	}
	return len(p), nil
}

// qemuOracle is the fuzz targets' reference: an image the decoder took
// must be one qemu-img converts too, to exactly the bytes the decoder
// wrote. A disagreement is a decoder bug (or a check qemu has and we do
// not); each one found becomes a test case.
func qemuOracle(t *testing.T, f format.Format, data []byte, got *oracleSink) {
	if got.disk == nil {
		return
	}
	if _, err := exec.LookPath("qemu-img"); err != nil {
		return
	}
	dir := t.TempDir()
	img, raw := filepath.Join(dir, "in.img"), filepath.Join(dir, "out.raw")
	if err := os.WriteFile(img, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "qemu-img", "convert", "-q", "-f", f.QemuName(), "-O", "raw", img, raw).CombinedOutput()
	if ctx.Err() != nil {
		t.Logf("qemu-img convert timed out; no reference for this input")
		return
	}
	if err != nil {
		t.Fatalf("the decoder took a %d-byte %s image that qemu-img refuses: %v: %s", len(data), f, err, bytes.TrimSpace(out))
	}
	want, err := os.ReadFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(want)) != got.size {
		t.Fatalf("disk size: decoder %d bytes, qemu-img %d", got.size, len(want))
	}
	if i := firstDifference(got.disk, want); i >= 0 {
		t.Fatalf("guest byte %d differs from qemu-img's conversion: decoder %#02x, qemu-img %#02x", i, got.disk[i], want[i])
	}
}

func firstDifference(a, b []byte) int {
	const step = 64 << 10
	for off := 0; off < len(a); off += step {
		end := min(off+step, len(a))
		if !bytes.Equal(a[off:end], b[off:end]) {
			for i := off; i < end; i++ {
				if a[i] != b[i] {
					return i
				}
			}
		}
	}
	return -1
}

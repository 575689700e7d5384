package streamdecode

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// boundsSink discards writes after checking they stay inside the disk.
type boundsSink struct{ size int64 }

func (s boundsSink) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > s.size {
		panic(fmt.Sprintf("write of %d bytes at %d outside the %d-byte disk", len(p), off, s.size))
	}
	return len(p), nil
}

// fuzzSeeds makes a few small images with qemu-img (none without it).
func fuzzSeeds(f *testing.F, fmtName string, variants [][]string) {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		return
	}
	dir := f.TempDir()
	// Small seeds: the fuzzer minimizes every new input, slowly for big ones.
	raw := rawDisk(f, filepath.Join(dir, "seed.raw"), 128<<10, 50, 9)
	for i, v := range variants {
		img := filepath.Join(dir, fmt.Sprintf("seed%d.img", i))
		testimg.Run(f, "qemu-img", append(append([]string{"convert", "-q", "-f", "raw", "-O", fmtName}, v...), raw, img)...)
		b, err := os.ReadFile(img)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// hangBound is how long fuzzDecode lets a decode or a check run before it
// calls the input a hang.
const hangBound = time.Minute

// fuzzDecode is the oracle shared by the fuzz targets: never a panic,
// never a write outside the disk, memory bounded by small limits, an
// image the structural checks refuse is refused, and an image taken is
// converted by qemu-img to the very bytes written (qemuOracle).
func fuzzDecode(t *testing.T, f format.Format, data []byte, dec decodeFunc, check func(*bytes.Reader, int64) error) {
	head := data[:min(len(data), format.DefaultPeekSize)]
	h, herr := format.ParseHeaderMax(f, head, 1<<30)
	size := h.VirtualSize
	if herr != nil {
		size = 1 << 30
	}
	sink := newOracleSink(size)
	done := make(chan error, 1)
	go func() {
		_, err := dec(context.Background(), bytes.NewReader(data), sink,
			Options{MaxBuffered: 1 << 20, Workers: 2, MaxVirtualSize: 1 << 30})
		done <- err
	}()
	// The bounds below catch an input that never ends (a loop in the
	// decoder or the check), not a slow machine: an input of the corpus
	// takes milliseconds, a minute is past any load, and a real loop still
	// shows, with the goroutines' stacks.
	var err error
	select {
	case err = <-done:
	case <-time.After(hangBound):
		buf := make([]byte, 1<<20)
		t.Fatalf("decode of %d bytes still running after %v:\n%s", len(data), hangBound, buf[:runtime.Stack(buf, true)])
	}
	if err != nil {
		return
	}
	if herr != nil {
		t.Fatalf("decoded an image whose header is refused: %v", herr)
	}
	checked := make(chan error, 1)
	go func() { checked <- check(bytes.NewReader(data), int64(len(data))) }()
	var cerr error
	select {
	case cerr = <-checked:
	case <-time.After(hangBound):
		buf := make([]byte, 1<<20)
		t.Fatalf("the structural check of %d bytes still running after %v:\n%s", len(data), hangBound, buf[:runtime.Stack(buf, true)])
	}
	if cerr != nil {
		t.Fatalf("decoded an image the structural check refuses: %v", cerr)
	}
	qemuOracle(t, f, data, sink)
}

func FuzzQCOW2(f *testing.F) {
	fuzzSeeds(f, "qcow2", [][]string{{"-o", "cluster_size=4096"}, {"-c", "-o", "cluster_size=4096"},
		{"-c", "-o", "compression_type=zstd,cluster_size=8192"}, {"-o", "extended_l2=on,cluster_size=16384"}, {"-o", "compat=0.10,cluster_size=512"}})
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzDecode(t, format.QCOW2, data, DecodeQCOW2, func(r *bytes.Reader, n int64) error { return format.CheckQCOW2(r, n) })
	})
}

func FuzzVMDK(f *testing.F) {
	fuzzSeeds(f, "vmdk", [][]string{{"-o", "subformat=streamOptimized"}})
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzDecode(t, format.VMDK, data, DecodeVMDK, func(r *bytes.Reader, n int64) error { return format.CheckVMDK(r, n) })
	})
}

func FuzzVHD(f *testing.F) {
	// qemu's writer makes 2 MiB blocks, too big for the fuzzer to mutate
	// quickly: hand-made small-block images, and qemu's with no block.
	disk := make([]byte, 12<<10)
	for i := range disk[4096 : 5<<10] {
		disk[4096+i] = byte(i*7 + 1)
	}
	for _, bs := range []int{512, 4096} {
		f.Add(smallBlockVHD(disk, bs))
	}
	emptySeeds(f, "vpc", [][]string{{"-o", "force_size=on"}, {}})
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzDecode(t, format.VHD, data, DecodeVHD, func(r *bytes.Reader, n int64) error { return format.CheckVHD(r, n) })
	})
}

func FuzzVDI(f *testing.F) {
	// Blocks are always 1 MiB: one seed with a block, the others none.
	emptySeeds(f, "vdi", [][]string{{}, {"-o", "static=on"}})
	if _, err := exec.LookPath("qemu-img"); err == nil {
		dir := f.TempDir()
		raw := filepath.Join(dir, "one.raw")
		if err := os.WriteFile(raw, append(make([]byte, 1<<20), "one block"...), 0o644); err != nil {
			f.Fatal(err)
		}
		img := filepath.Join(dir, "one.vdi")
		testimg.Run(f, "qemu-img", "convert", "-q", "-f", "raw", "-O", "vdi", raw, img)
		b, err := os.ReadFile(img)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzDecode(t, format.VDI, data, DecodeVDI, func(r *bytes.Reader, n int64) error { return format.CheckVDI(r, n) })
	})
}

// emptySeeds adds images of a 3 MiB disk made by qemu-img create (no
// block allocated; static ones are 3 MiB files).
func emptySeeds(f *testing.F, fmtName string, variants [][]string) {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		return
	}
	for i, v := range variants {
		img := filepath.Join(f.TempDir(), fmt.Sprintf("empty%d.img", i))
		testimg.Run(f, "qemu-img", append(append([]string{"create", "-q", "-f", fmtName}, v...), img, "3M")...)
		b, err := os.ReadFile(img)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// FuzzVHDXTables fuzzes what DecodeVHDX parses once its regions have
// passed: the metadata region and the BAT (a whole VHDX is at least
// 4 MiB, too big to mutate). Never a panic; the layout it returns is
// sane.
func FuzzVHDXTables(f *testing.F) {
	if _, err := exec.LookPath("qemu-img"); err == nil {
		for i, opts := range []string{"block_size=1M", "block_size=32M"} {
			img := filepath.Join(f.TempDir(), fmt.Sprintf("seed%d.vhdx", i))
			testimg.Run(f, "qemu-img", "create", "-q", "-f", "vhdx", "-o", opts, img, "5M")
			testimg.Run(f, "qemu-io", "-f", "vhdx", "-c", "write -P 1 1M 64k", img)
			b, err := os.ReadFile(img)
			if err != nil {
				f.Fatal(err)
			}
			bat, meta := vhdxSeedRegions(b)
			f.Add(bytes.TrimRight(meta[:format.VHDXMetadataTableLen+4096], "\x00"), bat[:64])
		}
	}
	f.Fuzz(func(t *testing.T, meta, bat []byte) {
		if len(meta) < format.VHDXMetadataTableLen+4096 {
			meta = append(meta, make([]byte, format.VHDXMetadataTableLen+4096-len(meta))...)
		}
		l, err := vhdxLayout(meta, bat, nil, 1<<40)
		if err != nil {
			return
		}
		if l.blockSize == 0 || l.vsize > 1<<40 {
			t.Fatalf("layout %+v", l)
		}
		for i, e := range l.blocks {
			if i > 0 && e.index <= l.blocks[i-1].index {
				t.Fatalf("blocks out of order: %+v", l.blocks)
			}
		}
	})
}

// vhdxSeedRegions returns a qemu-made VHDX's BAT and metadata regions.
func vhdxSeedRegions(b []byte) (bat, meta []byte) {
	batSpan, metaSpan, err := vhdxRegions(b[:vhdxHeadLen])
	if err != nil {
		panic(err)
	}
	return b[batSpan.off:batSpan.end], b[metaSpan.off:metaSpan.end]
}

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

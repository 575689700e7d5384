package streamdecode

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/iostage"
	"github.com/diskimport/engine/internal/testkit/hostileimg"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// blockImageCase is one generated VHD or VDI: how to make it from a raw
// disk, and what to do to it afterwards.
type blockImageCase struct {
	name  string
	size  int64 // raw disk size
	pct   int   // percent of 64 KiB pieces holding data
	make  func(t *testing.T, raw, img string)
	patch func(t *testing.T, img string) // optional, after make
}

// blockImage makes a raw disk in a new directory (rawDisk's size, dataPct
// and seed) and from it, with mk, the image name there.
func blockImage(t *testing.T, name string, size int64, dataPct int, seed uint64, mk func(t *testing.T, raw, img string)) string {
	t.Helper()
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := rawDisk(t, filepath.Join(dir, "disk.raw"), size, dataPct, seed)
	img := filepath.Join(dir, name)
	mk(t, raw, img)
	return img
}

// convertTo makes img from raw with qemu-img convert -O fmt [-o opts].
func convertTo(fmtName string, opts ...string) func(t *testing.T, raw, img string) {
	return func(t *testing.T, raw, img string) {
		args := []string{"convert", "-q", "-f", "raw", "-O", fmtName}
		if len(opts) > 0 {
			args = append(args, "-o", strings.Join(opts, ","))
		}
		testimg.Run(t, "qemu-img", append(args, raw, img)...)
	}
}

// writesOutOfOrder makes an image with qemu-img create and fills it with
// qemu-io writes in the given guest order (offsets in KiB), so its
// blocks are stored in that order, not the guest's.
func writesOutOfOrder(fmtName string, opts string, kib ...int64) func(t *testing.T, raw, img string) {
	return func(t *testing.T, raw, img string) {
		testimg.Need(t, "qemu-io")
		st, err := os.Stat(raw)
		if err != nil {
			t.Fatal(err)
		}
		args := []string{"create", "-q", "-f", fmtName}
		if opts != "" {
			args = append(args, "-o", opts)
		}
		testimg.Run(t, "qemu-img", append(args, img, fmt.Sprint(st.Size()))...)
		io := []string{"-f", fmtName}
		for i, k := range kib {
			io = append(io, "-c", fmt.Sprintf("write -P %d %dk 96k", 0x11*(i+1), k))
		}
		testimg.Run(t, "qemu-io", append(io, img)...)
	}
}

// checkBlockImage decodes img (through a plain sink and a zero sink, in
// choppy reads) and compares it with qemu-img's conversion.
func checkBlockImage(t *testing.T, dec decodeFunc, img, qfmt string) Stats {
	t.Helper()
	want := reference(t, img, qfmt)
	var st Stats
	for _, zs := range []bool{false, true} {
		got, s, err := decodeFile(t, dec, img, int64(len(want)), zs, Options{})
		if err != nil {
			t.Fatalf("zero sink %v: %v", zs, err)
		}
		if s.VirtualSize != int64(len(want)) {
			t.Fatalf("virtual size %d, qemu-img's %d", s.VirtualSize, len(want))
		}
		sameBytes(t, got, want)
		st = s
	}
	return st
}

func runBlockImageCases(t *testing.T, dec decodeFunc, qfmt string, cases []blockImageCase) {
	testimg.Need(t, "qemu-img")
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			raw := rawDisk(t, filepath.Join(dir, "disk.raw"), c.size, c.pct, uint64(100+i))
			img := filepath.Join(dir, "disk.img")
			c.make(t, raw, img)
			if c.patch != nil {
				c.patch(t, img)
			}
			st := checkBlockImage(t, dec, img, qfmt)
			t.Logf("%d stream bytes, %d data, buffered peak %d", st.StreamBytes, st.DataBytes, st.PeakBuffered)
		})
	}
}

// vhdLayout reads what a test needs of a dynamic VHD.
type vhdLayout struct {
	tableOff  int64
	entries   int
	blockSize int64
	bitmap    int64
	bat       []uint32
}

func readVHD(t *testing.T, b []byte) vhdLayout {
	t.Helper()
	be := binary.BigEndian
	l := vhdLayout{
		tableOff:  int64(be.Uint64(b[512+16:])),
		entries:   int(be.Uint32(b[512+28:])),
		blockSize: int64(be.Uint32(b[512+32:])),
	}
	l.bitmap = (l.blockSize/512/8 + 511) &^ 511
	for i := range l.entries {
		l.bat = append(l.bat, be.Uint32(b[l.tableOff+int64(4*i):]))
	}
	return l
}

func setBAT(b []byte, l vhdLayout, i int, v uint32) {
	binary.BigEndian.PutUint32(b[l.tableOff+int64(4*i):], v)
}

// fixDynChecksum recomputes the dynamic header's checksum after an edit.
func fixDynChecksum(b []byte) {
	dyn := b[512:1536]
	binary.BigEndian.PutUint32(dyn[36:], 0)
	var sum uint32
	for _, c := range dyn {
		sum += uint32(c)
	}
	binary.BigEndian.PutUint32(dyn[36:], ^sum)
}

func editFile(t *testing.T, path string, edit func(b []byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, edit(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

// vhdBATAtEnd moves the BAT behind the blocks (qemu reads it wherever the
// header says), so every block passes before its table.
func vhdBATAtEnd(t *testing.T, img string) {
	editFile(t, img, func(b []byte) []byte {
		l := readVHD(t, b)
		body, footer := b[:len(b)-512], b[len(b)-512:]
		newOff := (len(body) + 511) &^ 511
		out := append(append([]byte{}, body...), make([]byte, newOff-len(body))...)
		out = append(out, b[l.tableOff:l.tableOff+int64(4*l.entries)]...)
		out = append(out, make([]byte, (len(out)+511)&^511-len(out))...)
		clear(out[l.tableOff : l.tableOff+int64(4*l.entries)])
		binary.BigEndian.PutUint64(out[512+16:], uint64(newOff))
		fixDynChecksum(out)
		return append(out, footer...)
	})
}

// vhdClearBitmaps zeroes every allocated block's sector bitmap: qemu reads
// the blocks anyway.
func vhdClearBitmaps(t *testing.T, img string) {
	editFile(t, img, func(b []byte) []byte {
		l := readVHD(t, b)
		n := 0
		for _, s := range l.bat {
			if s != vhdUnallocated {
				clear(b[int64(s)*512 : int64(s)*512+l.bitmap])
				n++
			}
		}
		if n == 0 {
			t.Fatal("no allocated block")
		}
		return b
	})
}

func TestVHDLayouts(t *testing.T) {
	runBlockImageCases(t, DecodeVHD, "vpc", []blockImageCase{
		{name: "sparse-chs", size: 5_000_000, pct: 35, make: convertTo("vpc")},
		{name: "sparse-force-size", size: 5_000_000, pct: 35, make: convertTo("vpc", "force_size=on")},
		{name: "full-chs", size: 9<<20 + 4096, pct: 100, make: convertTo("vpc")},
		{name: "full-force-size", size: 9<<20 + 4096, pct: 100, make: convertTo("vpc", "force_size=on")},
		{name: "blocks-multiple", size: 8 << 20, pct: 50, make: convertTo("vpc", "force_size=on")},
		{name: "empty", size: 7<<20 + 512, pct: 0, make: convertTo("vpc", "force_size=on")},
		{name: "tiny", size: 1024, pct: 100, make: convertTo("vpc", "force_size=on")},
		{name: "out-of-order", size: 12 << 20, pct: 0, make: writesOutOfOrder("vpc", "force_size=on", 9000, 100, 4100, 2000, 11000)},
		{name: "out-of-order-chs", size: 12 << 20, pct: 0, make: writesOutOfOrder("vpc", "", 6000, 10, 2047)},
		{name: "bat-after-blocks", size: 6 << 20, pct: 40, make: convertTo("vpc", "force_size=on"), patch: vhdBATAtEnd},
		{name: "bitmaps-cleared", size: 6 << 20, pct: 60, make: convertTo("vpc"), patch: vhdClearBitmaps},
	})
}

// TestVHDEmptyDisk: a 0-byte disk has a BAT of no entries.
func TestVHDEmptyDisk(t *testing.T) {
	testimg.Need(t, "qemu-img")
	for _, name := range []string{"vpc", "vdi"} {
		img := filepath.Join(t.TempDir(), "empty")
		testimg.Run(t, "qemu-img", "create", "-q", "-f", name, img, "0")
		dec := map[string]decodeFunc{"vpc": DecodeVHD, "vdi": DecodeVDI}[name]
		_, st, err := decodeFile(t, dec, img, 0, true, Options{})
		if err != nil || st.VirtualSize != 0 {
			t.Errorf("%s: %v, virtual size %d", name, err, st.VirtualSize)
		}
	}
}

// TestVHDBATAfterBlocksBuffer: blocks ahead of their BAT are held up to
// MaxBuffered, past it the layout is not streamable.
func TestVHDBATAfterBlocksBuffer(t *testing.T) {
	img := blockImage(t, "disk.vhd", 6<<20, 40, 5, convertTo("vpc", "force_size=on"))
	vhdBATAtEnd(t, img)
	_, st, err := decodeFile(t, DecodeVHD, img, 6<<20, false, Options{})
	if err != nil || st.PeakBuffered == 0 {
		t.Fatalf("%v, buffered %d", err, st.PeakBuffered)
	}
	var be *BufferError
	if _, _, err := decodeFile(t, DecodeVHD, img, 6<<20, false, Options{MaxBuffered: 1 << 20}); !errors.Is(err, errdefs.ErrNotStreamable) || !errors.As(err, &be) {
		t.Fatalf("1 MiB buffer: %v, want a BufferError (ErrNotStreamable)", err)
	}
	// With a spill directory the rest goes there, and is gone after.
	spill := t.TempDir()
	want := reference(t, img, "vpc")
	got, st, err := decodeFile(t, DecodeVHD, img, int64(len(want)), true, Options{MaxBuffered: 1 << 20, SpillDir: spill})
	if err != nil {
		t.Fatal(err)
	}
	sameBytes(t, got, want)
	if st.SpilledBytes == 0 || st.PeakBuffered > 1<<20 {
		t.Fatalf("spilled %d bytes, %d in memory", st.SpilledBytes, st.PeakBuffered)
	}
	if ents, _ := os.ReadDir(spill); len(ents) != 0 {
		t.Fatalf("left in the spill directory: %v", ents)
	}
	t.Logf("spilled %d bytes (peak %d), %d in memory", st.SpilledBytes, st.PeakSpilled, st.PeakBuffered)
}

// corruptCase is a damaged image and the error the decoder must give.
type corruptCase struct {
	name string
	edit func(t *testing.T, b []byte) []byte
	want error
}

// runCorrupt applies each edit to a copy of img and decodes it.
func runCorrupt(t *testing.T, dec decodeFunc, f format.Format, img string, cases []corruptCase) {
	orig, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := c.edit(t, bytes.Clone(orig))
			h, herr := format.ParseHeader(f, b[:min(len(b), format.DefaultPeekSize)])
			size := h.VirtualSize
			if herr != nil || size < 0 {
				size = 1 << 30 // unknown from the head (VHDX)
			}
			_, err := dec(context.Background(), bytes.NewReader(b), boundsSink{size: size}, Options{})
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			t.Log(err)
		})
	}
}

func TestVHDCorrupt(t *testing.T) {
	img := blockImage(t, "disk.vhd", 8<<20, 100, 6, convertTo("vpc", "force_size=on"))
	b, _ := os.ReadFile(img)
	l := readVHD(t, b)
	if l.entries != 4 || l.bat[0] == vhdUnallocated || l.bat[1] == vhdUnallocated {
		t.Fatalf("unexpected layout %+v", l)
	}
	lastEnd := int64(l.bat[3])*512 + l.bitmap + l.blockSize
	cut := func(n int64) func(*testing.T, []byte) []byte {
		return func(_ *testing.T, b []byte) []byte { return b[:n] }
	}
	bat := func(i int, v uint32) func(*testing.T, []byte) []byte {
		return func(_ *testing.T, b []byte) []byte { setBAT(b, l, i, v); return b }
	}
	inv := errdefs.ErrInvalidImage
	runCorrupt(t, DecodeVHD, format.VHD, img, []corruptCase{
		{"empty", cut(0), inv},
		{"cut-in-footer", cut(300), inv},
		{"cut-in-dynamic-header", cut(1000), inv},
		{"cut-in-bat", cut(l.tableOff + 6), inv},
		{"cut-in-bat-sector", cut(l.tableOff + 16 + 4), inv},
		{"cut-in-first-block", cut(int64(l.bat[0])*512 + 4096), inv},
		{"cut-in-last-block", cut(lastEnd - 100), inv},
		{"cut-before-footer", cut(lastEnd - 1), inv},
		{"block-past-end", bat(2, uint32(len(b)/512)), inv},
		{"block-far-past-end", bat(1, 0xfffffff0), inv},
		{"duplicate", bat(1, l.bat[0]), inv},
		{"overlapping", bat(1, l.bat[0]+8), inv},
		{"over-footer-copy", bat(0, 0), inv},
		{"over-dynamic-header", bat(0, 2), inv},
		{"over-bat", bat(0, uint32(l.tableOff/512)), inv},
		{"bad-checksum", func(_ *testing.T, b []byte) []byte { b[512+40]++; return b }, inv},
		{"differencing", func(_ *testing.T, b []byte) []byte {
			binary.BigEndian.PutUint32(b[60:], 4)
			binary.BigEndian.PutUint32(b[64:], 0)
			var sum uint32
			for _, c := range b[:512] {
				sum += uint32(c)
			}
			binary.BigEndian.PutUint32(b[64:], ^sum)
			return b
		}, errdefs.ErrUnsafeImage},
	})
	// The structural check agrees on the truncations it sees.
	for _, n := range []int64{lastEnd - 100, int64(l.bat[0])*512 + 4096} {
		if err := format.CheckVHD(bytes.NewReader(b[:n]), n); !errors.Is(err, inv) {
			t.Errorf("CheckVHD of the image cut at %d: %v", n, err)
		}
	}
}

// smallBlockVHD writes disk as a dynamic VHD with blocks of blockSize
// bytes (qemu's writer only makes 2 MiB blocks; the format allows any
// power of two from 512 on, and qemu reads them): creator "qem2", so the
// disk is current_size long; blocks holding only zeros are left out and
// the others stored in reverse guest order.
func smallBlockVHD(disk []byte, blockSize int) []byte {
	be := binary.BigEndian
	entries := (len(disk) + blockSize - 1) / blockSize
	bitmap := (blockSize/512/8 + 511) &^ 511
	out := hostileimg.VHDHead(int64(len(disk)), entries, uint32(blockSize))
	footer := slices.Clone(out[:512])
	bat := make([]byte, (4*entries+511)&^511)
	for i := range bat {
		bat[i] = 0xff
	}
	out = append(out, bat...)
	for i := entries - 1; i >= 0; i-- {
		b := disk[i*blockSize : min(len(disk), (i+1)*blockSize)]
		if iostage.IsZero(b) {
			continue
		}
		be.PutUint32(out[vhdHeadLen+4*i:], uint32(len(out)/512))
		out = append(out, bytes.Repeat([]byte{0xff}, bitmap)...)
		out = append(out, b...)
		out = append(out, make([]byte, blockSize-len(b))...)
	}
	return append(out, footer...)
}

// TestVHDSmallBlocks: blocks of other sizes than qemu's 2 MiB, one of
// them the smallest the format allows, against qemu-img's reading.
func TestVHDSmallBlocks(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	disk, err := os.ReadFile(rawDisk(t, filepath.Join(dir, "disk.raw"), 3<<20+7*512, 30, 8))
	if err != nil {
		t.Fatal(err)
	}
	for _, bs := range []int{512, 4096, 64 << 10, 1 << 20} {
		t.Run(fmt.Sprint(bs), func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "small.vhd")
			if err := os.WriteFile(img, smallBlockVHD(disk, bs), 0o644); err != nil {
				t.Fatal(err)
			}
			st := checkBlockImage(t, DecodeVHD, img, "vpc")
			if st.VirtualSize != int64(len(disk)) {
				t.Fatalf("virtual size %d, want %d", st.VirtualSize, len(disk))
			}
		})
	}
}

// TestVHDVirtualSizes: the disk is as long as qemu-img says, for sizes
// qemu's CHS geometry rounds (creator "qemu") and for force_size ones
// (creator "qem2", current_size), up to the format's 2040 GiB.
func TestVHDVirtualSizes(t *testing.T) {
	testimg.Need(t, "qemu-img")
	for _, size := range []string{"1M", "5000000", "1073741831", "40G", "127G", "2040G"} {
		for _, opts := range []string{"force_size=off", "force_size=on"} {
			t.Run(size+"/"+opts, func(t *testing.T) {
				img := filepath.Join(t.TempDir(), "disk.vhd")
				testimg.Run(t, "qemu-img", "create", "-q", "-f", "vpc", "-o", opts, img, size)
				want := qemuVirtualSize(t, img, "vpc")
				f, err := os.Open(img)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				st, err := DecodeVHD(context.Background(), f, boundsSink{size: want}, Options{})
				if err != nil {
					t.Fatal(err)
				}
				if st.VirtualSize != want {
					t.Fatalf("virtual size %d, qemu-img's %d", st.VirtualSize, want)
				}
			})
		}
	}
}

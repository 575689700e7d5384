package streamdecode

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

func TestVHDXLayouts(t *testing.T) {
	runBlockImageCases(t, DecodeVHDX, "vhdx", []blockImageCase{
		{name: "sparse-default", size: 5_000_000, pct: 35, make: convertTo("vhdx")},
		{name: "sparse-1M", size: 5_000_000, pct: 35, make: convertTo("vhdx", "block_size=1M")},
		{name: "full-1M", size: 9<<20 + 4096, pct: 100, make: convertTo("vhdx", "block_size=1M")},
		{name: "full-32M", size: 9<<20 + 4096, pct: 100, make: convertTo("vhdx", "block_size=32M")},
		{name: "fixed", size: 6<<20 + 512, pct: 50, make: convertTo("vhdx", "subformat=fixed,block_size=1M")},
		{name: "empty", size: 7<<20 + 512, pct: 0, make: convertTo("vhdx")},
		{name: "tiny", size: 1024, pct: 100, make: convertTo("vhdx", "block_size=1M")},
		{name: "out-of-order", size: 12 << 20, pct: 0, make: writesOutOfOrder("vhdx", "block_size=1M", 9000, 100, 4100, 2000, 11000)},
	})
}

// TestVHDXPastFirstChunk: a disk past 4 GiB has a sector bitmap entry in
// its BAT after each chunk's payload entries; blocks on both sides of it
// land where qemu reads them.
func TestVHDXPastFirstChunk(t *testing.T) {
	testimg.Need(t, "qemu-img", "qemu-io")
	dir := t.TempDir()
	img := filepath.Join(dir, "big.vhdx")
	testimg.Run(t, "qemu-img", "create", "-q", "-f", "vhdx", "-o", "block_size=32M", img, "4400M")
	testimg.Run(t, "qemu-io", "-f", "vhdx", "-c", "write -P 0x61 4200M 1M", "-c", "write -P 0x62 10M 64k", "-c", "write -P 0x63 4095M 2M", img)
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out, err := os.Create(filepath.Join(dir, "out.raw"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	st, err := DecodeVHDX(context.Background(), f, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.VirtualSize != 4400<<20 || st.DataBytes != 3<<20+64<<10 {
		t.Fatalf("virtual size %d, data %d", st.VirtualSize, st.DataBytes)
	}
	if err := out.Truncate(st.VirtualSize); err != nil {
		t.Fatal(err)
	}
	testimg.Run(t, "qemu-img", "compare", "-q", "-f", "raw", "-F", "vhdx", out.Name(), img)
}

// vhdxLayoutOf reads the regions and header fields a test edits.
type vhdxFile struct {
	bat, meta uint64
	header    int // offset of the current header
}

func readVHDXFile(t *testing.T, b []byte) vhdxFile {
	t.Helper()
	le := binary.LittleEndian
	var f vhdxFile
	rt := b[format.VHDXRegionTable1:]
	for i := range le.Uint32(rt[8:]) {
		e := rt[16+32*i:]
		switch [16]byte(e[:16]) {
		case format.VHDXBATRegion:
			f.bat = le.Uint64(e[16:])
		case format.VHDXMetadataRegion:
			f.meta = le.Uint64(e[16:])
		}
	}
	f.header = format.VHDXHeader1
	if le.Uint64(b[format.VHDXHeader2+8:]) > le.Uint64(b[format.VHDXHeader1+8:]) {
		f.header = format.VHDXHeader2
	}
	return f
}

// fixCRC recomputes the CRC-32C at off+4 of the n bytes at off.
func fixCRC(b []byte, off, n int) {
	binary.LittleEndian.PutUint32(b[off+4:], 0)
	binary.LittleEndian.PutUint32(b[off+4:], crc32.Checksum(b[off:off+n], crc32.MakeTable(crc32.Castagnoli)))
}

func TestVHDXCorrupt(t *testing.T) {
	img := blockImage(t, "disk.vhdx", 4<<20, 100, 9, convertTo("vhdx", "block_size=1M"))
	b, _ := os.ReadFile(img)
	v := readVHDXFile(t, b)
	le := binary.LittleEndian
	first := le.Uint64(b[v.bat:]) &^ (vhdxMiB - 1)
	last := le.Uint64(b[v.bat+24:]) &^ (vhdxMiB - 1)
	if le.Uint64(b[v.bat:])&7 != 6 || le.Uint64(b[v.bat+24:])&7 != 6 {
		t.Fatalf("unexpected BAT %x", b[v.bat:v.bat+32])
	}
	cut := func(n uint64) func(*testing.T, []byte) []byte {
		return func(_ *testing.T, b []byte) []byte { return b[:n] }
	}
	entry := func(i int, v64 uint64) func(*testing.T, []byte) []byte {
		return func(_ *testing.T, b []byte) []byte { le.PutUint64(b[v.bat+uint64(8*i):], v64); return b }
	}
	inv := errdefs.ErrInvalidImage
	runCorrupt(t, DecodeVHDX, format.VHDX, img, []corruptCase{
		{"empty", cut(0), inv},
		{"cut-in-headers", cut(100 << 10), inv},
		{"cut-before-regions", cut(vhdxMiB + 4096), inv},
		{"cut-in-bat", cut(v.bat + 4), inv},
		{"cut-in-first-block", cut(first + 4096), inv},
		{"cut-in-last-block", cut(last + 1<<20 - 100), inv},
		{"block-past-end", entry(1, uint64(len(b))|6), inv},
		{"block-far-past-end", entry(1, 1<<50|6), inv},
		{"duplicate", entry(1, first|6), inv},
		{"over-first-MiB", entry(0, 6), inv},
		{"over-bat", entry(0, v.bat|6), inv},
		{"over-metadata", entry(0, v.meta|6), inv},
		{"over-log", entry(0, vhdxMiB|6), inv},
		{"partially-present", entry(2, first+2<<20|7), inv},
		{"bad-region-table-1", func(_ *testing.T, b []byte) []byte {
			// qemu refuses it even with a good second copy.
			b[format.VHDXRegionTable1+100]++
			return b
		}, inv},
		{"bad-header-crcs", func(_ *testing.T, b []byte) []byte {
			b[format.VHDXHeader1+200]++
			b[format.VHDXHeader2+200]++
			return b
		}, inv},
		{"same-sequence-different-headers", func(_ *testing.T, b []byte) []byte {
			le.PutUint64(b[format.VHDXHeader1+8:], 7)
			le.PutUint64(b[format.VHDXHeader2+8:], 7)
			b[format.VHDXHeader1+16]++ // the file write GUIDs differ
			fixCRC(b, format.VHDXHeader1, format.VHDXHeaderLen)
			fixCRC(b, format.VHDXHeader2, format.VHDXHeaderLen)
			return b
		}, inv},
		{"log-at-0", func(_ *testing.T, b []byte) []byte {
			for _, h := range []int{format.VHDXHeader1, format.VHDXHeader2} {
				le.PutUint64(b[h+72:], 0)
				fixCRC(b, h, format.VHDXHeaderLen)
			}
			return b
		}, inv},
		{"log-version", func(_ *testing.T, b []byte) []byte {
			for _, h := range []int{format.VHDXHeader1, format.VHDXHeader2} {
				le.PutUint16(b[h+64:], 1)
				fixCRC(b, h, format.VHDXHeaderLen)
			}
			return b
		}, inv},
		{"differencing", func(_ *testing.T, b []byte) []byte {
			fp := vhdxItem(t, b, v, format.VHDXFileParameters)
			b[fp+4] |= format.VHDXHasParent
			return b
		}, errdefs.ErrUnsafeImage},
		{"log-to-replay", func(_ *testing.T, b []byte) []byte {
			b[v.header+48] = 1
			fixCRC(b, v.header, format.VHDXHeaderLen)
			return b
		}, errdefs.ErrNotStreamable},
		{"4k-sectors", func(_ *testing.T, b []byte) []byte {
			le.PutUint32(b[vhdxItem(t, b, v, format.VHDXLogicalSectorSize):], 4096)
			return b
		}, errdefs.ErrNotStreamable},
		{"block-size", func(_ *testing.T, b []byte) []byte {
			le.PutUint32(b[vhdxItem(t, b, v, format.VHDXFileParameters):], 3<<20)
			return b
		}, inv},
	})
}

// vhdxItem is the file offset of a metadata item.
func vhdxItem(t *testing.T, b []byte, v vhdxFile, id [16]byte) uint64 {
	le := binary.LittleEndian
	m := b[v.meta:]
	for i := range int(le.Uint16(m[10:])) {
		e := m[32+32*i:]
		if [16]byte(e[:16]) == id {
			return v.meta + uint64(le.Uint32(e[16:]))
		}
	}
	t.Fatalf("no metadata item %x", id)
	return 0
}

// TestVHDXOneCopyDamaged: a damaged current header is passed over for the
// other, as qemu does.
func TestVHDXOneCopyDamaged(t *testing.T) {
	img := blockImage(t, "disk.vhdx", 3<<20, 60, 10, convertTo("vhdx", "block_size=1M"))
	editFile(t, img, func(b []byte) []byte {
		v := readVHDXFile(t, b)
		b[v.header+300]++ // the current header: the older one is used
		return b
	})
	checkBlockImage(t, DecodeVHDX, img, "vhdx")
}

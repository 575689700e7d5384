package streamdecode

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/format"
)

// vdiLayout reads what a test needs of a VDI.
type vdiLayout struct {
	mapOff, dataOff int64
	blocks          int
	bmap            []uint32
}

func readVDI(b []byte) vdiLayout {
	le := binary.LittleEndian
	l := vdiLayout{mapOff: int64(le.Uint32(b[0x154:])), dataOff: int64(le.Uint32(b[0x158:])), blocks: int(le.Uint32(b[0x180:]))}
	for i := range l.blocks {
		l.bmap = append(l.bmap, le.Uint32(b[l.mapOff+int64(4*i):]))
	}
	return l
}

func setVDIMap(b []byte, l vdiLayout, i int, v uint32) {
	binary.LittleEndian.PutUint32(b[l.mapOff+int64(4*i):], v)
}

// vdiZeroBlock marks the first allocated block as a zero block
// (0xFFFFFFFE): qemu reads zeros, whatever its slot holds.
func vdiZeroBlock(t *testing.T, img string) {
	editFile(t, img, func(b []byte) []byte {
		l := readVDI(b)
		for i, v := range l.bmap {
			if v < vdiDiscarded {
				setVDIMap(b, l, i, vdiDiscarded)
				return b
			}
		}
		t.Fatal("no allocated block")
		return nil
	})
}

// vdiBlockExtra sets block_extra, which qemu ignores.
func vdiBlockExtra(t *testing.T, img string) {
	editFile(t, img, func(b []byte) []byte {
		binary.LittleEndian.PutUint32(b[0x17c:], 512)
		return b
	})
}

func TestVDILayouts(t *testing.T) {
	runBlockImageCases(t, DecodeVDI, "vdi", []blockImageCase{
		{name: "dynamic-sparse", size: 5_000_000, pct: 35, make: convertTo("vdi")},
		{name: "dynamic-full", size: 9<<20 + 4096, pct: 100, make: convertTo("vdi")},
		{name: "dynamic-blocks-multiple", size: 8 << 20, pct: 50, make: convertTo("vdi")},
		{name: "dynamic-empty", size: 7<<20 + 512, pct: 0, make: convertTo("vdi")},
		{name: "dynamic-tiny", size: 1024, pct: 100, make: convertTo("vdi")},
		{name: "static-sparse", size: 5_000_000, pct: 35, make: convertTo("vdi", "static=on")},
		{name: "static-full", size: 6<<20 + 512, pct: 100, make: convertTo("vdi", "static=on")},
		{name: "static-empty", size: 3 << 20, pct: 0, make: convertTo("vdi", "static=on")},
		{name: "out-of-order", size: 12 << 20, pct: 0, make: writesOutOfOrder("vdi", "", 9000, 100, 4100, 2000, 11000)},
		{name: "zero-block", size: 6 << 20, pct: 60, make: convertTo("vdi"), patch: vdiZeroBlock},
		{name: "block-extra", size: 4 << 20, pct: 60, make: convertTo("vdi"), patch: vdiBlockExtra},
	})
}

func TestVDICorrupt(t *testing.T) {
	img := blockImage(t, "disk.vdi", 4<<20, 100, 7, convertTo("vdi"))
	b, _ := os.ReadFile(img)
	l := readVDI(b)
	if l.blocks != 4 || l.bmap[0] != 0 || l.bmap[3] != 3 {
		t.Fatalf("unexpected layout %+v", l)
	}
	const bs = 1 << 20
	end := l.dataOff + 4*bs
	cut := func(n int64) func(*testing.T, []byte) []byte {
		return func(_ *testing.T, b []byte) []byte { return b[:n] }
	}
	entry := func(i int, v uint32) func(*testing.T, []byte) []byte {
		return func(_ *testing.T, b []byte) []byte { setVDIMap(b, l, i, v); return b }
	}
	header := func(off int, v uint32) func(*testing.T, []byte) []byte {
		return func(_ *testing.T, b []byte) []byte { binary.LittleEndian.PutUint32(b[off:], v); return b }
	}
	inv := errdefs.ErrInvalidImage
	runCorrupt(t, DecodeVDI, format.VDI, img, []corruptCase{
		{"empty", cut(0), inv},
		{"cut-in-header", cut(300), inv},
		{"cut-in-map", cut(l.mapOff + 6), inv},
		{"cut-in-first-block", cut(l.dataOff + 4096), inv},
		{"cut-in-last-block", cut(end - 100), inv},
		{"block-past-end", entry(2, 4), inv},
		{"block-far-past-end", entry(1, 0xfffff000), inv},
		{"duplicate", entry(1, 0), inv},
		{"data-over-header", header(0x158, 0), inv},
		{"data-over-map", header(0x158, uint32(l.mapOff)), inv},
		{"parent-uuid", func(_ *testing.T, b []byte) []byte { b[0x1b8] = 1; return b }, errdefs.ErrUnsafeImage},
		{"link-uuid", func(_ *testing.T, b []byte) []byte { b[0x1a8] = 1; return b }, errdefs.ErrUnsafeImage},
		{"differencing", header(0x4c, 4), errdefs.ErrUnsafeImage},
		{"bad-signature", header(0x40, 0), inv},
	})
	for _, n := range []int64{end - 100, l.dataOff + 4096} {
		if err := format.CheckVDI(bytes.NewReader(b[:n]), n); !errors.Is(err, inv) {
			t.Errorf("CheckVDI of the image cut at %d: %v", n, err)
		}
	}
}

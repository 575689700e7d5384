package hostileimg

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/diskimport/engine/internal/iostage"
)

const (
	vmdkSector    = 512
	vmdkGDAtEnd   = ^uint64(0)
	vmdkFlags     = 1 | 1<<16 | 1<<17 // newline test, compressed grains, markers
	vmdkMarkerGT  = 1
	vmdkMarkerGD  = 2
	vmdkMarkerFtr = 3
)

// vmdkHeader is a streamOptimized sparse header: descriptor in sector 1.
func vmdkHeader(capacity, grain uint64, gtes uint32, gdOffset, overhead uint64) []byte {
	le := binary.LittleEndian
	h := make([]byte, vmdkSector)
	copy(h, "KDMV")
	le.PutUint32(h[4:], 3)
	le.PutUint32(h[8:], vmdkFlags)
	le.PutUint64(h[12:], capacity)
	le.PutUint64(h[20:], grain)
	le.PutUint64(h[28:], 1) // descriptor offset
	le.PutUint64(h[36:], 1) // descriptor sectors
	le.PutUint32(h[44:], gtes)
	le.PutUint64(h[56:], gdOffset)
	le.PutUint64(h[64:], overhead)
	copy(h[73:], "\n \r\n")
	le.PutUint16(h[77:], 1) // deflate
	return h
}

func vmdkDescriptor(capacity uint64) []byte {
	d := make([]byte, vmdkSector)
	copy(d, fmt.Sprintf("# Disk DescriptorFile\nversion=1\nCID=12345678\nparentCID=ffffffff\ncreateType=\"streamOptimized\"\n\n"+
		"# Extent description\nRW %d SPARSE \"hostile.vmdk\"\n\n# The Disk Data Base\n#DDB\n\nddb.virtualHWVersion = \"4\"\nddb.adapterType = \"ide\"\n", capacity))
	return d
}

// VMDKTablesAhead writes a streamOptimized vmdk whose header names a grain
// directory and grainTables full grain tables in its overhead, every entry
// pointing at a grain of its own, and then ends: one-sector grains, so the
// disk is grainTables*512*512 bytes. 32000 tables are 62.5 MiB of tables
// (about 700 KB as xz) naming 16.4 million grains, which a decoder keeping
// a map entry per expected grain turns into about 800 MB.
func VMDKTablesAhead(w io.Writer, grainTables int) error {
	const gtes = 512
	le := binary.LittleEndian
	gdSectors := (uint64(grainTables)*4 + vmdkSector - 1) / vmdkSector
	firstGT := 2 + gdSectors
	overhead := firstGT + uint64(grainTables)*gtes*4/vmdkSector
	capacity := uint64(grainTables) * gtes
	return buffered(w, func(w *bufio.Writer) error {
		w.Write(vmdkHeader(capacity, 1, gtes, 2, overhead))
		w.Write(vmdkDescriptor(capacity))
		gd := make([]byte, gdSectors*vmdkSector)
		for i := range grainTables {
			le.PutUint32(gd[4*i:], uint32(firstGT+uint64(i)*gtes*4/vmdkSector))
		}
		w.Write(gd)
		gt := make([]byte, gtes*4)
		grain := overhead
		for range grainTables {
			for j := range gtes {
				le.PutUint32(gt[4*j:], uint32(grain))
				grain++
			}
			if _, err := w.Write(gt); err != nil {
				return err
			}
		}
		return zeros(w, vmdkSector) // end-of-stream marker
	})
}

// VMDKManyTables writes a streamOptimized vmdk in VMware's layout (grain
// directory after the grains, named by a footer) that carries tables
// empty grain tables of one sector each (128 entries) before its grain
// directory, footer and end-of-stream marker: a kilobyte of stream, and
// nearly nothing compressed, per table a decoder must remember until the
// directory says which it uses.
func VMDKManyTables(w io.Writer, tables int) error {
	const gtes, grain = 128, 8
	le := binary.LittleEndian
	capacity := uint64(gtes * grain) // one grain table covers the disk
	return buffered(w, func(w *bufio.Writer) error {
		w.Write(vmdkHeader(capacity, grain, gtes, vmdkGDAtEnd, 2))
		w.Write(vmdkDescriptor(capacity))
		for range tables {
			vmdkMarker(w, 1, vmdkMarkerGT)
			if err := zeros(w, vmdkSector); err != nil {
				return err
			}
		}
		gdAt := uint64(2+2*tables) + 1
		vmdkMarker(w, 1, vmdkMarkerGD)
		gd := make([]byte, vmdkSector)
		le.PutUint32(gd, 3) // the first table
		w.Write(gd)
		vmdkMarker(w, 1, vmdkMarkerFtr)
		w.Write(vmdkHeader(capacity, grain, gtes, gdAt, 2))
		return zeros(w, vmdkSector)
	})
}

// VMDKFooter writes disk (a multiple of 64 KiB) as a streamOptimized vmdk
// in VMware's layout: each non-zero 64 KiB grain behind its marker, then
// the grain tables and the grain directory as metadata markers, then a
// footer marker, the footer (the header's copy that names the directory;
// its magic number is footerMagic, "KDMV" for a sound image) and the
// end-of-stream marker. The header defers to the footer.
func VMDKFooter(w io.Writer, disk []byte, footerMagic string) error {
	const gtes, grain = 512, 128
	le := binary.LittleEndian
	capacity := uint64(len(disk)) / vmdkSector
	grains := (capacity + grain - 1) / grain
	tables := (grains + gtes - 1) / gtes
	return buffered(w, func(w *bufio.Writer) error {
		w.Write(vmdkHeader(capacity, grain, gtes, vmdkGDAtEnd, 2))
		w.Write(vmdkDescriptor(capacity))
		sector := uint64(2)
		gt := make([]byte, tables*gtes*4)
		for g := range grains {
			b := disk[g*grain*vmdkSector : min(uint64(len(disk)), (g+1)*grain*vmdkSector)]
			if iostage.IsZero(b) {
				continue
			}
			var z bytes.Buffer
			zw := zlib.NewWriter(&z)
			zw.Write(b)
			if err := zw.Close(); err != nil {
				return err
			}
			m := make([]byte, 12, 12+z.Len()+vmdkSector)
			le.PutUint64(m, g*grain)
			le.PutUint32(m[8:], uint32(z.Len()))
			m = append(m, z.Bytes()...)
			m = append(m, make([]byte, (vmdkSector-len(m)%vmdkSector)%vmdkSector)...)
			le.PutUint32(gt[4*g:], uint32(sector))
			w.Write(m)
			sector += uint64(len(m)) / vmdkSector
		}
		gd := make([]byte, (tables*4+vmdkSector-1)/vmdkSector*vmdkSector)
		for i := range tables {
			vmdkMarker(w, gtes*4/vmdkSector, vmdkMarkerGT)
			le.PutUint32(gd[4*i:], uint32(sector+1))
			w.Write(gt[i*gtes*4 : (i+1)*gtes*4])
			sector += 1 + gtes*4/vmdkSector
		}
		vmdkMarker(w, uint64(len(gd))/vmdkSector, vmdkMarkerGD)
		w.Write(gd)
		gdAt := sector + 1
		vmdkMarker(w, 1, vmdkMarkerFtr)
		footer := vmdkHeader(capacity, grain, gtes, gdAt, 2)
		copy(footer, footerMagic)
		w.Write(footer)
		return zeros(w, vmdkSector)
	})
}

// vmdkMarker writes a streamOptimized vmdk metadata marker: its sector
// count and type (the marker's first 16 bytes), the rest of the sector
// zero.
func vmdkMarker(w io.Writer, sectors uint64, typ uint32) {
	m := make([]byte, vmdkSector)
	binary.LittleEndian.PutUint64(m, sectors)
	binary.LittleEndian.PutUint32(m[12:], typ)
	w.Write(m)
}

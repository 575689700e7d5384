package format

import (
	"encoding/binary"
	"fmt"
	"io"
)

// VMDK stream markers (streamOptimized), from the Virtual Disk Format
// specification.
const (
	vmdkMarkerEndOfStream = 0
	vmdkMarkerFooter      = 3
	vmdkGrainMarkerLen    = 12 // lba (8) + compressed size (4)
	vmdkGTEZeroed         = 1  // grain table entry of a zeroed grain
	vmdkMaxGDEntries      = 32 << 20
)

// CheckVMDK checks the structure of a complete sparse or streamOptimized
// vmdk file of size bytes: the header (and for streamOptimized the footer
// that replaces it, which must agree with it), the embedded descriptor,
// the grain directory, every grain table and every grain (for compressed
// grains their marker and compressed length) must lie inside the file.
// qemu-img reads what lies past the end of a truncated vmdk as zeros and
// succeeds, so this is what catches a vmdk cut off in its last grain.
// Memory stays bounded: the file is read through a small window.
func CheckVMDK(r io.ReaderAt, size int64) error {
	if size < vmdkHeaderLen {
		return invalidf(VMDK, "file of %d bytes is shorter than a header", size)
	}
	head := make([]byte, min(size, DefaultPeekSize))
	if err := readFullAt(r, head, 0); err != nil {
		return err
	}
	if _, err := parseVMDKHeader(head); err != nil {
		return err
	}
	sh := decodeVMDKSparseHeader(head)
	if sh.gdOffset == vmdkGDAtEnd {
		footer, err := readVMDKFooter(r, size, sh)
		if err != nil {
			return err
		}
		sh = footer
	}
	c := vmdkChecker{r: newWindowReader(r, size), size: uint64(size), h: sh}
	return c.checkGrainDirectory()
}

// readVMDKFooter returns the footer's header copy, which qemu uses in
// place of the header: footer marker, footer, end-of-stream marker in the
// last three sectors. It must describe the same disk as the header and
// give the grain directory's real offset.
func readVMDKFooter(r io.ReaderAt, size int64, head vmdkSparseHeader) (vmdkSparseHeader, error) {
	const f = VMDK
	le := binary.LittleEndian
	if size%vmdkSector != 0 || size < vmdkHeaderLen+3*vmdkSector {
		return vmdkSparseHeader{}, invalidf(f, "header defers to a footer, but the file of %d bytes cannot end in one", size)
	}
	b := make([]byte, 3*vmdkSector)
	if err := readFullAt(r, b, size-int64(len(b))); err != nil {
		return vmdkSparseHeader{}, err
	}
	marker, footerSector, eos := b[:vmdkSector], b[vmdkSector:2*vmdkSector], b[2*vmdkSector:]
	if le.Uint32(marker[8:]) != 0 || le.Uint32(marker[12:]) != vmdkMarkerFooter {
		return vmdkSparseHeader{}, invalidf(f, "no footer marker before the footer")
	}
	if le.Uint64(eos) != 0 || le.Uint32(eos[8:]) != 0 || le.Uint32(eos[12:]) != vmdkMarkerEndOfStream {
		return vmdkSparseHeader{}, invalidf(f, "no end-of-stream marker after the footer")
	}
	ft := decodeVMDKSparseHeader(footerSector)
	if err := ft.validate(); err != nil {
		return vmdkSparseHeader{}, fmt.Errorf("%s footer: %w", f, err)
	}
	switch {
	case ft.gdOffset == vmdkGDAtEnd:
		return vmdkSparseHeader{}, unsafef(f, "footer points to another footer")
	case ft.gdOffset == 0:
		return vmdkSparseHeader{}, invalidf(f, "footer gives no grain directory")
	case ft.version != head.version, ft.flags != head.flags, ft.capacity != head.capacity,
		ft.grain != head.grain, ft.descOffset != head.descOffset, ft.descSize != head.descSize,
		ft.gtesPerGT != head.gtesPerGT, ft.compress != head.compress:
		return vmdkSparseHeader{}, unsafef(f, "footer does not agree with the header (version, flags, capacity, grain or descriptor differ)")
	}
	return ft, nil
}

type vmdkChecker struct {
	r    *windowReader
	size uint64
	h    vmdkSparseHeader
	// Bytes the tables and grains seen so far take at the least: more than
	// the file holds means they overlap, and stops a hostile directory
	// from making the walk cost far more than the file's size.
	claimed uint64
}

// claim adds n bytes of distinct structure, failing once the total
// exceeds the file.
func (c *vmdkChecker) claim(what string, n uint64) error {
	c.claimed += n
	if c.claimed > c.size {
		return invalidf(VMDK, "%s: the grain tables and grains would take more than the %d-byte file (they overlap)", what, c.size)
	}
	return nil
}

// inside fails unless [off, off+n) lies inside the file.
func (c *vmdkChecker) inside(what string, off, n uint64) error {
	if off > c.size || n > c.size-off {
		return invalidf(VMDK, "%s (bytes %d..%d) lies past the end of the %d-byte file", what, off, off+n, c.size)
	}
	return nil
}

func (c *vmdkChecker) checkGrainDirectory() error {
	h := c.h
	coverage := uint64(h.gtesPerGT) * h.grain // sectors per grain table
	entries := (h.capacity + coverage - 1) / coverage
	if entries > vmdkMaxGDEntries {
		return unsafef(VMDK, "grain directory of %d entries", entries)
	}
	gdBytes := entries * 4
	if h.gdOffset == 0 {
		return invalidf(VMDK, "no grain directory")
	}
	if h.gdOffset > c.size/vmdkSector || h.rgdOffset > c.size/vmdkSector {
		// Checked in sectors first: a byte offset could wrap around.
		return invalidf(VMDK, "grain directory at sector %d (redundant: %d) lies past the end of the %d-byte file", h.gdOffset, h.rgdOffset, c.size)
	}
	if err := c.inside("grain directory", h.gdOffset*vmdkSector, gdBytes); err != nil {
		return err
	}
	if h.flags&vmdkFlagRedundantGD != 0 && h.rgdOffset != 0 {
		// qemu reads the redundant directory too.
		if err := c.inside("redundant grain directory", h.rgdOffset*vmdkSector, gdBytes); err != nil {
			return err
		}
	}
	if h.compressed() && h.flags&vmdkFlagMarkers == 0 {
		return unsupportedf(VMDK, "compressed grains without grain markers")
	}
	gd := make([]byte, 4)
	for i := uint64(0); i < entries; i++ {
		if err := c.r.readAt(gd, h.gdOffset*vmdkSector+i*4); err != nil {
			return err
		}
		gt := uint64(binary.LittleEndian.Uint32(gd))
		if gt == 0 {
			continue // no grain table: the range reads as zeros
		}
		if err := c.checkGrainTable(i, gt); err != nil {
			return err
		}
	}
	return nil
}

// checkGrainTable checks grain table number index at sector gtSector.
func (c *vmdkChecker) checkGrainTable(index, gtSector uint64) error {
	h := c.h
	gtBytes := uint64(h.gtesPerGT) * 4
	if gtSector*vmdkSector < vmdkHeaderLen {
		return invalidf(VMDK, "grain table %d overlaps the header", index)
	}
	if err := c.inside("grain table", gtSector*vmdkSector, gtBytes); err != nil {
		return err
	}
	if err := c.claim("grain table", gtBytes); err != nil {
		return err
	}
	gte := make([]byte, 4)
	grainBytes := h.grain * vmdkSector
	capacityBytes := h.capacity * vmdkSector
	for j := uint64(0); j < uint64(h.gtesPerGT); j++ {
		grainIndex := index*uint64(h.gtesPerGT) + j
		if grainIndex*grainBytes >= capacityBytes {
			break // entries past the disk's end are never read
		}
		if err := c.r.readAt(gte, gtSector*vmdkSector+j*4); err != nil {
			return err
		}
		sector := uint64(binary.LittleEndian.Uint32(gte))
		if sector == 0 || (sector == vmdkGTEZeroed && h.flags&vmdkFlagZeroGrain != 0) {
			continue
		}
		if sector*vmdkSector < vmdkHeaderLen {
			return invalidf(VMDK, "grain %d overlaps the header", grainIndex)
		}
		if err := c.checkGrain(grainIndex, sector*vmdkSector, min(grainBytes, capacityBytes-grainIndex*grainBytes)); err != nil {
			return err
		}
	}
	return nil
}

// checkGrain checks one allocated grain of want bytes (less than a grain
// for the disk's last one) at byte offset off.
func (c *vmdkChecker) checkGrain(index, off, want uint64) error {
	if !c.h.compressed() {
		if err := c.inside("grain", off, want); err != nil {
			return err
		}
		return c.claim("grain", want)
	}
	// Each compressed grain starts on a sector of its own.
	if err := c.claim("compressed grain", vmdkSector); err != nil {
		return err
	}
	marker := make([]byte, vmdkGrainMarkerLen)
	if err := c.inside("compressed grain marker", off, vmdkGrainMarkerLen); err != nil {
		return err
	}
	if err := c.r.readAt(marker, off); err != nil {
		return err
	}
	lba := binary.LittleEndian.Uint64(marker)
	n := uint64(binary.LittleEndian.Uint32(marker[8:]))
	if lba != index*c.h.grain {
		return invalidf(VMDK, "compressed grain %d is marked as sector %d, want %d", index, lba, index*c.h.grain)
	}
	// qemu reads at most two grains' worth of compressed data.
	if n == 0 || n > 2*c.h.grain*vmdkSector {
		return invalidf(VMDK, "compressed grain %d has a length of %d bytes", index, n)
	}
	return c.inside("compressed grain", off+vmdkGrainMarkerLen, n)
}

// windowReader reads small pieces of a file through one cached window, so
// that walking tables entry by entry costs one read per window, locally or
// over HTTP ranges.
type windowReader struct {
	r      io.ReaderAt
	size   int64
	buf    []byte
	start  int64
	filled int
}

const windowBytes = 1 << 20

func newWindowReader(r io.ReaderAt, size int64) *windowReader {
	return &windowReader{r: r, size: size, buf: make([]byte, windowBytes), start: -1}
}

// readAt fills p from offset off, which the caller has checked lies
// inside the file; len(p) must not exceed the window.
func (w *windowReader) readAt(p []byte, off uint64) error {
	o := int64(off)
	if w.start < 0 || o < w.start || o+int64(len(p)) > w.start+int64(w.filled) {
		w.start = o &^ (windowBytes/2 - 1) // half-window aligned, so a read never straddles
		n := int(min(int64(len(w.buf)), w.size-w.start))
		if err := readFullAt(w.r, w.buf[:n], w.start); err != nil {
			w.start = -1
			return err
		}
		w.filled = n
	}
	if o+int64(len(p)) > w.start+int64(w.filled) {
		return invalidf(VMDK, "read of %d bytes at %d past the end of the file", len(p), off)
	}
	copy(p, w.buf[o-w.start:])
	return nil
}

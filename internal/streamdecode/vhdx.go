package streamdecode

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/iostage"
)

// VHDX layout (MS-VHDX, little endian; the headers, tables and GUIDs are
// format's, shared with its structure check): the first MiB holds the file
// identifier, two headers and two region tables; the regions they name
// (BAT, metadata) and the log lie at 1 MiB multiples after it, then the
// payload blocks. qemu and Hyper-V put the log, metadata and BAT right
// after the first MiB and every payload block after them.
const (
	vhdxHeadLen = 1 << 20
	vhdxMiB     = 1 << 20

	vhdxBlockZeroStates = 1<<0 | 1<<1 | 1<<2 | 1<<3 | 1<<5 // not present, undefined, zero, unmapped (and its v0.95 value)
	vhdxBlockPresent    = 6
	vhdxBATOffsetMask   = ^uint64(vhdxMiB - 1)
)

// DecodeVHDX reads a VHDX from r, from its first byte on, and writes the
// guest disk to sink, applying qemu's checks as the bytes pass: a valid
// header and region table, the required metadata items, no block stored
// over the first MiB, the log, the metadata, the BAT or another block, and
// every block in the stream (errdefs.ErrInvalidImage). A log that may need
// replaying (qemu opens such an image only read-write), 4 KiB logical
// sectors, unknown required regions or metadata items are
// errdefs.ErrNotStreamable; a differencing VHDX is errdefs.ErrUnsafeImage.
// The sink may have received writes when an error is returned.
func DecodeVHDX(ctx context.Context, r io.Reader, sink Sink, o Options) (Stats, error) {
	o = o.withDefaults()
	head, n, err := readHead(r, "vhdx", vhdxHeadLen)
	if err != nil {
		return Stats{}, err
	}
	if n < vhdxHeadLen {
		return Stats{}, fmt.Errorf("vhdx: the %d-byte stream ends inside the first MiB (truncated image?): %w", n, errdefs.ErrInvalidImage)
	}
	if !bytes.HasPrefix(head, []byte("vhdxfile")) {
		return Stats{}, fmt.Errorf("vhdx: bad file identifier: %w", errdefs.ErrInvalidImage)
	}
	logSpan, err := vhdxHeader(head)
	if err != nil {
		return Stats{}, err
	}
	bat, meta, err := vhdxRegions(head)
	if err != nil {
		return Stats{}, err
	}
	m := blockMap{
		name:      "vhdx",
		headEnd:   vhdxHeadLen,
		tables:    []span{meta, bat},
		need:      max(bat.end, meta.end),
		maxBlocks: (bat.end - bat.off) / 8,
	}
	if logSpan.end > logSpan.off {
		if logSpan.off < vhdxHeadLen || (logSpan.off < bat.end && logSpan.end > bat.off) || (logSpan.off < meta.end && logSpan.end > meta.off) {
			return Stats{}, fmt.Errorf("vhdx: the log at %d..%d overlaps the first MiB, the BAT or the metadata: %w", logSpan.off, logSpan.end, errdefs.ErrInvalidImage)
		}
		m.reserved = []span{logSpan}
	}
	m.parse = func(t [][]byte, blocks []blockExtent) (blockLayout, error) {
		// tables are sorted by offset when parse runs.
		mb, bb := t[0], t[1]
		if meta.off > bat.off {
			mb, bb = bb, mb
		}
		l, err := vhdxLayout(mb, bb, blocks, o.MaxVirtualSize)
		if err == nil && o.TargetSize > 0 && int64(l.vsize) > o.TargetSize {
			// Blocks that came before the tables are only held, so
			// nothing has reached the sink yet.
			return blockLayout{}, &errdefs.SizeError{ImageSize: int64(l.vsize), TargetSize: o.TargetSize, What: errdefs.VirtualImageSize}
		}
		return l, err
	}
	return decodeBlockMap(ctx, r, m, sink, o)
}

// vhdxHeader picks the current header (valid, highest sequence number) and
// returns the log's place.
func vhdxHeader(head []byte) (span, error) {
	le := binary.LittleEndian
	var cur []byte
	var seq uint64
	for _, off := range []int{format.VHDXHeader1, format.VHDXHeader2} {
		h := head[off : off+format.VHDXHeaderLen]
		if !format.VHDXIntact(h, "head") {
			continue
		}
		switch s := le.Uint64(h[8:]); {
		case cur == nil || s > seq:
			cur, seq = h, s
		case s == seq && !bytes.Equal(h, cur):
			// Disk2VHD writes two identical headers; two different ones
			// with one sequence number are a damaged image to qemu.
			return span{}, fmt.Errorf("vhdx: two different headers with sequence number %d: %w", s, errdefs.ErrInvalidImage)
		}
	}
	if cur == nil {
		return span{}, fmt.Errorf("vhdx: no valid header: %w", errdefs.ErrInvalidImage)
	}
	if v := le.Uint16(cur[66:]); v != 1 {
		return span{}, fmt.Errorf("vhdx: header version %d: %w", v, errdefs.ErrUnsupportedFormat)
	}
	// qemu checks the log's place and version even when there is no log
	// to replay.
	logLen, logOff := uint64(le.Uint32(cur[68:])), le.Uint64(cur[72:])
	if logOff < vhdxMiB || logOff%vhdxMiB != 0 || logOff > 1<<50 {
		return span{}, fmt.Errorf("vhdx: log at %d, not a whole MiB past the first: %w", logOff, errdefs.ErrInvalidImage)
	}
	if v := le.Uint16(cur[64:]); v != 0 {
		return span{}, fmt.Errorf("vhdx: log version %d: %w", v, errdefs.ErrInvalidImage)
	}
	if !iostage.IsZero(cur[48:64]) && logLen > 0 {
		return span{}, fmt.Errorf("vhdx: the header names a log, which may need replaying (qemu replays it only when writing the image): %w", errdefs.ErrNotStreamable)
	}
	return span{logOff, logOff + logLen, "log"}, nil
}

// vhdxRegions reads the region table and returns the BAT and metadata
// regions. Only the first copy: qemu 7.2 refuses an image whose first copy
// is damaged, whatever the second holds (tested), and the decoder must not
// accept what qemu refuses.
func vhdxRegions(head []byte) (bat, meta span, err error) {
	off := format.VHDXRegionTable1
	regions, n, err := format.ParseVHDXRegionTable(head[off:off+format.VHDXRegionTableLen], int64(off))
	if err != nil {
		return bat, meta, fmt.Errorf("vhdx: the region table at %d is damaged (signature or CRC-32C): %w", off, errdefs.ErrInvalidImage)
	}
	if n > format.VHDXMaxEntries {
		return bat, meta, fmt.Errorf("vhdx: region table of %d entries: %w", n, errdefs.ErrInvalidImage)
	}
	var haveBAT, haveMeta bool
	for i, e := range regions {
		start, length := e.Start, e.Length
		if start%vhdxMiB != 0 || length%vhdxMiB != 0 || start < vhdxMiB || start > 1<<50 {
			return bat, meta, fmt.Errorf("vhdx: region %d at %d (+%d) not aligned to 1 MiB: %w", i, start, length, errdefs.ErrInvalidImage)
		}
		s := span{start, start + length, ""}
		switch e.GUID {
		case format.VHDXBATRegion:
			if haveBAT {
				return bat, meta, fmt.Errorf("vhdx: two BAT regions: %w", errdefs.ErrInvalidImage)
			}
			haveBAT, bat = true, s
			bat.what = "BAT"
		case format.VHDXMetadataRegion:
			if haveMeta {
				return bat, meta, fmt.Errorf("vhdx: two metadata regions: %w", errdefs.ErrInvalidImage)
			}
			haveMeta, meta = true, s
			meta.what = "metadata region"
		default:
			if e.Required {
				return bat, meta, fmt.Errorf("vhdx: region %d of a required kind the decoder does not know: %w", i, errdefs.ErrNotStreamable)
			}
		}
	}
	if !haveBAT || !haveMeta {
		return bat, meta, fmt.Errorf("vhdx: the region table lacks the BAT or the metadata region: %w", errdefs.ErrInvalidImage)
	}
	return bat, meta, nil
}

// vhdxLayout reads the metadata items and the BAT; the stored blocks are
// appended to extents.
func vhdxLayout(meta, bat []byte, extents []blockExtent, maxVirtual int64) (blockLayout, error) {
	le := binary.LittleEndian
	inv := func(f string, a ...any) (blockLayout, error) {
		return blockLayout{}, fmt.Errorf("vhdx: "+f+": %w", append(a, errdefs.ErrInvalidImage)...)
	}
	table, n, ok := format.ParseVHDXMetadataTable(meta)
	if !ok {
		return inv("no metadata table")
	}
	if n > format.VHDXMaxEntries {
		return inv("metadata table of %d entries", n)
	}
	items := map[[16]byte][]byte{}
	for i, e := range table {
		id, off, length := e.GUID, e.Offset, e.Length
		switch id {
		case format.VHDXFileParameters, format.VHDXVirtualDiskSize, format.VHDXPage83Data,
			format.VHDXLogicalSectorSize, format.VHDXPhysicalSectorSize, format.VHDXParentLocator:
		default:
			if e.Required {
				return blockLayout{}, fmt.Errorf("vhdx: metadata item %d of a required kind the decoder does not know: %w", i, errdefs.ErrNotStreamable)
			}
			continue
		}
		if _, dup := items[id]; dup {
			return inv("metadata item %d given twice", i)
		}
		if off < format.VHDXMetadataTableLen || off+length > uint64(len(meta)) {
			return blockLayout{}, fmt.Errorf("vhdx: metadata item %d at %d (+%d) outside the metadata region: %w", i, off, length, errdefs.ErrNotStreamable)
		}
		items[id] = meta[off : off+length]
	}
	need := func(id [16]byte, n int, what string) ([]byte, error) {
		b, ok := items[id]
		if !ok || len(b) < n {
			return nil, fmt.Errorf("vhdx: metadata item %s missing or short: %w", what, errdefs.ErrInvalidImage)
		}
		return b, nil
	}
	fp, err := need(format.VHDXFileParameters, 8, "file parameters")
	if err != nil {
		return blockLayout{}, err
	}
	ds, err := need(format.VHDXVirtualDiskSize, 8, "virtual disk size")
	if err != nil {
		return blockLayout{}, err
	}
	lss, err := need(format.VHDXLogicalSectorSize, 4, "logical sector size")
	if err != nil {
		return blockLayout{}, err
	}
	pss, err := need(format.VHDXPhysicalSectorSize, 4, "physical sector size")
	if err != nil {
		return blockLayout{}, err
	}
	if _, err := need(format.VHDXPage83Data, 16, "page 83 data"); err != nil {
		return blockLayout{}, err
	}
	if le.Uint32(fp[4:])&format.VHDXHasParent != 0 {
		return blockLayout{}, fmt.Errorf("vhdx: differencing disk refers to a parent image: %w", errdefs.ErrUnsafeImage)
	}
	blockSize := uint64(le.Uint32(fp))
	if blockSize < vhdxMiB || blockSize > 256<<20 || blockSize&(blockSize-1) != 0 {
		return inv("block size %d", blockSize)
	}
	if p := le.Uint32(pss); p != 512 && p != 4096 {
		return inv("physical sector size %d", p)
	}
	sector := uint64(le.Uint32(lss))
	switch sector {
	case 512:
	case 4096:
		return blockLayout{}, fmt.Errorf("vhdx: 4 KiB logical sectors: %w", errdefs.ErrNotStreamable)
	default:
		return inv("logical sector size %d", sector)
	}
	if maxVirtual <= 0 {
		maxVirtual = format.DefaultMaxVirtualSize
	}
	vsize := le.Uint64(ds)
	if vsize > uint64(maxVirtual) {
		return blockLayout{}, fmt.Errorf("vhdx: virtual size %d exceeds the limit %d: %w", vsize, maxVirtual, errdefs.ErrUnsafeImage)
	}
	if vsize%sector != 0 {
		return blockLayout{}, fmt.Errorf("vhdx: virtual size %d not a whole number of sectors: %w", vsize, errdefs.ErrNotStreamable)
	}
	// A sector bitmap entry follows every chunkRatio payload entries.
	chunkRatio := (uint64(1) << 23) * sector / blockSize
	blocks := (vsize + blockSize - 1) / blockSize
	entries := uint64(0)
	if blocks > 0 {
		entries = blocks + (blocks-1)/chunkRatio
	}
	if entries*8 > uint64(len(bat)) {
		return inv("a BAT region of %d bytes cannot hold %d entries", len(bat), entries)
	}
	l := blockLayout{vsize: vsize, blockSize: blockSize, partialLast: true, blocks: extents}
	for i := range entries {
		e := le.Uint64(bat[8*i:])
		state := e & 7
		if (i+1)%(chunkRatio+1) == 0 {
			if state != 0 {
				// Only differencing images have sector bitmaps.
				return blockLayout{}, fmt.Errorf("vhdx: sector bitmap block %d in state %d: %w", i/(chunkRatio+1), state, errdefs.ErrNotStreamable)
			}
			continue
		}
		b := i - i/(chunkRatio+1)
		switch {
		case vhdxBlockZeroStates&(1<<state) != 0:
		case state == vhdxBlockPresent:
			l.blocks = append(l.blocks, blockExtent{start: e & vhdxBATOffsetMask, index: b})
		default:
			// Partially present is for differencing images; qemu fails to
			// read either.
			return inv("payload block %d in state %d", b, state)
		}
	}
	return l, nil
}

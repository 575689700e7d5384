package streamdecode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/buffers"
	"github.com/diskimport/engine/internal/format"
)

// streamOptimized vmdk layout (VMware "Virtual Disk Format 1.1"): the
// header, the descriptor, then from sector `overhead` on a sequence of
// sector-aligned markers: a grain marker (lba, compressed size, zlib
// data) or a metadata marker (sectors, size 0, type) followed by its
// sectors: grain table, grain directory, footer, end of stream.
const (
	vmdkSector        = 512
	vmdkGDAtEnd       = ^uint64(0)
	vmdkFlagRGD       = 1 << 1
	vmdkFlagZeroGrain = 1 << 2
	vmdkFlagMarkers   = 1 << 17
	vmdkGTEZeroed     = 1

	vmdkMarkerEOS    = 0
	vmdkMarkerGT     = 1
	vmdkMarkerGD     = 2
	vmdkMarkerFooter = 3
)

// vmdkMagic opens the header and the footer.
var vmdkMagic = []byte("KDMV")

type vmdkHeader struct {
	version, flags       uint32
	capacity, grain      uint64 // sectors
	descOffset, descSize uint64
	gtesPerGT            uint32
	rgdOffset, gdOffset  uint64
	overhead             uint64
	compress             uint16
}

func decodeVMDKHeader(b []byte) vmdkHeader {
	le := binary.LittleEndian
	return vmdkHeader{
		version: le.Uint32(b[4:]), flags: le.Uint32(b[8:]),
		capacity: le.Uint64(b[12:]), grain: le.Uint64(b[20:]),
		descOffset: le.Uint64(b[28:]), descSize: le.Uint64(b[36:]),
		gtesPerGT: le.Uint32(b[44:]), rgdOffset: le.Uint64(b[48:]), gdOffset: le.Uint64(b[56:]),
		overhead: le.Uint64(b[64:]), compress: le.Uint16(b[77:]),
	}
}

type vmdkDecoder struct {
	h        vmdkHeader
	br       *bufio.Reader
	pos      uint64 // stream bytes consumed
	grainB   uint64
	capB     uint64
	out      *output
	inf      *inflaters
	outFree  chan []byte
	inPool   *buffers.Pool // compressed grains, each up to 2 grains long
	book     bookkeeping
	ahead    *vmdkAhead // the tables came ahead of the grains
	headerGD bool       // tables behind, the header (not a footer) names the directory
	// Tables behind the grains: the grains still to be mapped, the tables
	// seen, the last grain directory (vmdkAhead).
	pending  []vmdkPending
	claimed  int
	tables   []vmdkTable
	gt       []byte // the grain table being read
	gd       []byte
	gdSector uint64
	grains   int64
}

// grainsAheadBytes is how many bytes of inflated grains the decoder may hold
// ahead of the writes.
const grainsAheadBytes = 4 << 20

// DecodeVMDK reads a streamOptimized vmdk from r, from its first byte on,
// and writes the guest disk to sink. Every grain is inflated as its marker
// passes; the grain tables, directory and footer that follow must account
// for exactly the grains written, as qemu, which reads through them,
// would see them (format.CheckVMDK's checks). Other sparse vmdks, or a
// stream that does not end in footer and end-of-stream marker, give
// errdefs.ErrNotStreamable.
func DecodeVMDK(ctx context.Context, r io.Reader, sink Sink, o Options) (st Stats, err error) {
	o = o.withDefaults()
	br := bufio.NewReaderSize(r, 1<<20)
	head, err := br.Peek(format.DefaultPeekSize)
	if err != nil && !errors.Is(err, io.EOF) {
		return st, fmt.Errorf("vmdk: read header: %w", err)
	}
	hdr, err := format.ParseHeaderMax(format.VMDK, head, o.MaxVirtualSize)
	if err != nil {
		return st, err
	}
	h := decodeVMDKHeader(head)
	switch {
	case h.compress != 1 || h.flags&vmdkFlagMarkers == 0:
		return st, fmt.Errorf("vmdk: grains not compressed with markers: %w", errdefs.ErrNotStreamable)
	case h.overhead*vmdkSector < (h.descOffset+h.descSize)*vmdkSector || h.overhead > 1<<20:
		return st, fmt.Errorf("vmdk: first grain at sector %d, inside the header or descriptor: %w", h.overhead, errdefs.ErrInvalidImage)
	}
	d := &vmdkDecoder{
		h: h, br: br, grainB: h.grain * vmdkSector, capB: h.capacity * vmdkSector,
		book: bookkeeping{max: o.MaxBuffered},
	}
	st.VirtualSize = hdr.VirtualSize
	if h.gdOffset != vmdkGDAtEnd {
		// qemu's own streamOptimized writer keeps the tables in the
		// header's overhead, ahead of every grain.
		err := d.tablesAhead()
		if errors.Is(err, errTablesBehind) {
			// VMware's: the header names a directory that follows the
			// grains, tables and directory as markers, as with a footer.
			d.headerGD, err = true, nil
		}
		if err != nil {
			return st, err
		}
	}
	// The decoder holds grainsAheadBytes of inflated grains and queues
	// every one of them, so it reads on while the writes catch up: with 4
	// × workers + 2 grains (640 KiB of 64 KiB grains) it stopped reading
	// whenever they lagged. 1 GiB over HTTP onto a loop device as a pod,
	// medians of 8 interleaved runs: 1.39 s instead of 1.46 (the grains'
	// inflation keeps both cores busy either way).
	nbuf := max(2, min(max(4*o.Workers+2, int(grainsAheadBytes/d.grainB)), int((64<<20)/d.grainB)))
	d.inf = newInflaters(ctx, codecZlib, o.Workers, int(d.grainB), o.InflateChild)
	d.out = newOutput(ctx, sink, nbuf)
	d.outFree = buffers.Circulating(nbuf, int(d.grainB), 1)
	// A compressed grain is read into a buffer of this pool and handed
	// back once inflated: the pool keeps one per queued job and per
	// worker, and one being read. A fresh buffer per grain (377 MB per
	// GiB of the bench disk) kept the heap at its GC goal, twice what is
	// live: 1 GiB as a pod peaked at 166 MiB RSS that way, at 95 MiB with
	// the pool.
	d.inPool = buffers.NewPool(int(2*d.grainB), 2*o.Workers+2, 1)
	defer func() {
		d.inf.stop()
		if werr := d.out.close(); err == nil && werr != nil {
			err = werr
		}
		st.DataBytes = d.out.data
		st.Compressed = d.grains
		st.StreamBytes = int64(d.pos)
		st.PeakBuffered = d.book.peak
	}()
	// A target holding old data is zeroed first; the grains land after it
	// in queue order.
	d.out.zero(0, int64(d.capB))
	if err := d.skip(h.overhead * vmdkSector); err != nil {
		return st, err
	}
	return st, d.markers(ctx)
}

func (d *vmdkDecoder) invalid(format string, a ...any) error {
	return fmt.Errorf("vmdk: "+format+": %w", append(a, errdefs.ErrInvalidImage)...)
}

// read fills p from the stream; the stream ending first is a truncated
// image.
func (d *vmdkDecoder) read(p []byte) error {
	n, err := io.ReadFull(d.br, p)
	d.pos += uint64(n)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return d.invalid("stream ends at byte %d, inside a marker or grain (truncated image?)", d.pos)
	}
	return err
}

func (d *vmdkDecoder) skip(to uint64) error {
	if to < d.pos {
		return d.invalid("marker at byte %d overlaps what came before", to)
	}
	n, err := d.br.Discard(int(to - d.pos))
	d.pos += uint64(n)
	if err == io.EOF { //nolint:errorlint // bare: the stream itself ended
		return d.invalid("stream ends at byte %d, before byte %d (truncated image?)", d.pos, to)
	}
	return err
}

func (d *vmdkDecoder) markers(ctx context.Context) error {
	le := binary.LittleEndian
	marker := make([]byte, vmdkSector)
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("vmdk: %w: %w", errdefs.ErrCancelled, err)
		}
		if d.out.failed.Load() {
			return nil
		}
		sector := d.pos / vmdkSector
		if d.ahead != nil || d.headerGD {
			if _, err := d.br.Peek(1); errors.Is(err, io.EOF) {
				return d.end()
			}
		}
		if err := d.read(marker[:12]); err != nil {
			return err
		}
		val, size := le.Uint64(marker), uint64(le.Uint32(marker[8:]))
		if size != 0 {
			if err := d.grain(sector, val, size); err != nil {
				return err
			}
			continue
		}
		if err := d.read(marker[12:]); err != nil {
			return err
		}
		typ := le.Uint32(marker[12:])
		switch typ {
		case vmdkMarkerEOS:
			if d.ahead != nil || d.headerGD {
				if _, err := io.Copy(io.Discard, d.br); err != nil {
					return err
				}
				return d.end()
			}
			return d.invalid("end-of-stream marker without a footer before it")
		case vmdkMarkerGT, vmdkMarkerGD:
			if val == 0 || val > 1<<16 {
				return d.invalid("metadata marker of %d sectors", val)
			}
			if err := d.metadata(typ, sector+1, val*vmdkSector); err != nil {
				return err
			}
		case vmdkMarkerFooter:
			if d.ahead != nil || d.headerGD {
				if err := d.skip(d.pos + val*vmdkSector); err != nil {
					return err
				}
				continue
			}
			return d.footer(sector+1, val)
		default:
			return d.invalid("marker of unknown type %d at sector %d", typ, sector)
		}
	}
}

// grain reads one compressed grain and queues its inflation.
func (d *vmdkDecoder) grain(sector, lba, size uint64) error {
	if size > 2*d.grainB {
		return d.invalid("grain at sector %d has a length of %d bytes", sector, size)
	}
	if lba%d.h.grain != 0 || lba >= d.h.capacity {
		return d.invalid("grain at sector %d is marked as sector %d of a %d-sector disk", sector, lba, d.h.capacity)
	}
	end := (d.pos + size + vmdkSector - 1) &^ (vmdkSector - 1)
	if d.ahead != nil {
		if !d.meetAhead(sector, lba) {
			return d.skip(end) // in no grain table: qemu never reads it
		}
	} else if err := d.addPending(sector, lba); err != nil {
		return fmt.Errorf("vmdk: %d grains before their grain table: %w", len(d.pending)-d.claimed, err)
	}
	in := d.inPool.Get()[:size]
	if err := d.read(in); err != nil {
		return err
	}
	if err := d.skip(end); err != nil {
		return err
	}
	off := lba * vmdkSector
	want := int(min(d.grainB, d.capB-off))
	x := &op{off: int64(off), ready: make(chan struct{}), free: d.outFree}
	x.outBuf = <-d.outFree
	d.out.send(x)
	d.grains++
	d.inf.jobs <- inflateJob{in: in, inPool: d.inPool, out: x.outBuf, want: want, keep: want, op: x, what: fmt.Sprintf("vmdk grain at sector %d", sector)}
	return nil
}

// metadata reads a grain table or directory marker's n bytes at sector
// at: only what the tables behind the grains need is kept, and with the
// tables ahead nothing (these are copies qemu does not read).
func (d *vmdkDecoder) metadata(typ uint32, at, n uint64) error {
	keep := uint64(0)
	switch {
	case d.ahead != nil:
	case typ == vmdkMarkerGT:
		keep = min(n, uint64(d.h.gtesPerGT)*4)
	case !d.headerGD || at == d.h.gdOffset:
		coverage := uint64(d.h.gtesPerGT) * d.h.grain
		keep = min(n, (d.h.capacity+coverage-1)/coverage*4)
	}
	var b []byte
	if typ == vmdkMarkerGT {
		if uint64(cap(d.gt)) < keep {
			d.gt = make([]byte, keep)
		}
		b = d.gt[:keep]
	} else if keep > 0 {
		// The directory replaces the one before.
		d.book.release(int64(len(d.gd)))
		if err := d.book.charge(int64(keep)); err != nil {
			return fmt.Errorf("vmdk: a grain directory of %d bytes: %w", keep, err)
		}
		d.gd, d.gdSector = make([]byte, keep), at
		b = d.gd
	}
	if err := d.read(b); err != nil {
		return err
	}
	if err := d.skip(d.pos + n - keep); err != nil {
		return err
	}
	if typ == vmdkMarkerGT && d.ahead == nil {
		return d.grainTable(at, b)
	}
	return nil
}

// grainTable accounts for the grains a table maps: each entry must point
// at a grain marker already passed and marked with the entry's sector.
func (d *vmdkDecoder) grainTable(at uint64, b []byte) error {
	n := uint64(d.h.gtesPerGT)
	if uint64(len(b)) < n*4 {
		return d.invalid("grain table at sector %d of %d bytes, want %d", at, len(b), n*4)
	}
	index := int64(-1)
	for j := uint64(0); j < n; j++ {
		s := uint64(binary.LittleEndian.Uint32(b[j*4:]))
		if s == 0 || (s == vmdkGTEZeroed && d.h.flags&vmdkFlagZeroGrain != 0) {
			continue
		}
		lba, ok := d.claim(s)
		if !ok {
			if s >= at {
				return fmt.Errorf("vmdk: grain table at sector %d points ahead to sector %d: %w", at, s, errdefs.ErrNotStreamable)
			}
			return d.invalid("grain table at sector %d points to sector %d, which holds no grain (or one mapped twice)", at, s)
		}
		g := lba / d.h.grain
		i := int64(g / n)
		if g%n != j || (index >= 0 && i != index) {
			return d.invalid("grain at sector %d is marked as sector %d, but grain table entry %d maps it elsewhere", s, lba, j)
		}
		index = i
	}
	d.compactPending()
	if err := d.addTable(at, index); err != nil {
		return fmt.Errorf("vmdk: %d grain tables: %w", len(d.tables), err)
	}
	return nil
}

// footer checks the footer against the header, the grain directory it
// names against the tables seen, and that the stream ends right after.
func (d *vmdkDecoder) footer(at, sectors uint64) error {
	// qemu (and format.CheckVMDK) read the footer from the sector after
	// its marker whatever the marker's count says; 1 is what writers put.
	if sectors > 1 {
		return d.invalid("footer marker of %d sectors", sectors)
	}
	b := make([]byte, 2*vmdkSector)
	if err := d.read(b); err != nil {
		return err
	}
	if !bytes.Equal(b[:4], vmdkMagic) {
		// qemu: "Invalid footer".
		return d.invalid("footer at sector %d does not start with the vmdk magic number (%q)", at, b[:4])
	}
	f := decodeVMDKHeader(b)
	h := d.h
	if f.version != h.version || f.flags != h.flags || f.capacity != h.capacity || f.grain != h.grain ||
		f.descOffset != h.descOffset || f.descSize != h.descSize || f.gtesPerGT != h.gtesPerGT || f.compress != h.compress {
		return fmt.Errorf("vmdk: footer does not agree with the header: %w", errdefs.ErrUnsafeImage)
	}
	eos := b[vmdkSector:]
	le := binary.LittleEndian
	if le.Uint64(eos) != 0 || le.Uint32(eos[8:]) != 0 || le.Uint32(eos[12:]) != vmdkMarkerEOS {
		return d.invalid("no end-of-stream marker after the footer")
	}
	var one [1]byte
	if n, _ := io.ReadFull(d.br, one[:]); n != 0 {
		// qemu takes the footer from the file's last sectors: anything
		// after the end-of-stream marker makes that another footer.
		return fmt.Errorf("vmdk: bytes after the end-of-stream marker: %w", errdefs.ErrNotStreamable)
	}
	if s, ok := d.unclaimed(); ok {
		return d.invalid("grain at sector %d is in no grain table (qemu would not read it)", s)
	}
	if f.gdOffset == vmdkGDAtEnd || f.gdOffset == 0 {
		return d.invalid("footer gives no grain directory")
	}
	if f.flags&vmdkFlagRGD != 0 && f.rgdOffset != 0 && f.rgdOffset >= at {
		return d.invalid("redundant grain directory at sector %d lies past the stream", f.rgdOffset)
	}
	if d.gd == nil || f.gdOffset != d.gdSector {
		return fmt.Errorf("vmdk: footer's grain directory at sector %d is not the one the stream carried: %w", f.gdOffset, errdefs.ErrNotStreamable)
	}
	return d.grainDirectory()
}

func (d *vmdkDecoder) grainDirectory() error {
	coverage := uint64(d.h.gtesPerGT) * d.h.grain
	entries := (d.h.capacity + coverage - 1) / coverage
	if uint64(len(d.gd)) < entries*4 {
		return d.invalid("grain directory of %d bytes, want %d entries", len(d.gd), entries)
	}
	if err := d.book.charge(int64(len(d.tables))); err != nil {
		return fmt.Errorf("vmdk: %d grain tables: %w", len(d.tables), err)
	}
	used := make([]bool, len(d.tables))
	for i := uint64(0); i < entries; i++ {
		s := uint64(binary.LittleEndian.Uint32(d.gd[i*4:]))
		if s == 0 {
			continue
		}
		k := d.table(s)
		if k < 0 {
			return d.invalid("grain directory entry %d points to sector %d, which holds no grain table", i, s)
		}
		if idx := d.tables[k].index; idx >= 0 && uint64(idx) != i {
			return d.invalid("grain directory entry %d points to the grain table of entry %d", i, idx)
		}
		if used[k] {
			return d.invalid("grain directory entries share the grain table at sector %d", s)
		}
		used[k] = true
	}
	for k, t := range d.tables {
		if t.index >= 0 && !used[k] {
			return d.invalid("grain table at sector %d is in no grain directory entry (qemu would not read its grains)", t.sector)
		}
	}
	return nil
}

// end checks, at the end of the stream, that every grain the tables name
// was met, or with the tables behind, that they account for every grain.
func (d *vmdkDecoder) end() error {
	if d.headerGD {
		if s, ok := d.unclaimed(); ok {
			return d.invalid("grain at sector %d is in no grain table (qemu would not read it)", s)
		}
		if d.gd == nil {
			return d.invalid("the header's grain directory at sector %d was not in the %d-byte stream", d.h.gdOffset, d.pos)
		}
		return d.grainDirectory()
	}
	if d.ahead.metN < d.ahead.named {
		return d.missingAhead()
	}
	if d.h.flags&vmdkFlagRGD != 0 && d.h.rgdOffset*vmdkSector >= d.pos {
		return d.invalid("redundant grain directory lies past the end of the stream")
	}
	return nil
}

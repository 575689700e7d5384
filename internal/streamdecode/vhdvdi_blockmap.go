package streamdecode

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"slices"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/iostage"
)

// blockMap is what a block-map image (dynamic VHD, VDI) tells of itself in
// its header: one table of 32-bit entries, one per fixed-size guest block,
// each naming where the block is stored in the file or that it reads as
// zeros. Every writer puts the table ahead of the blocks, which follow in
// any order; blocks that pass before the table are kept (bounded) until it
// arrives.
type blockMap struct {
	name      string // "vhd", "vdi": the prefix of messages
	vsize     uint64
	headEnd   uint64 // the header, [0, headEnd), already read
	tableOff  uint64
	entries   uint64
	tableNeed uint64 // the stream must reach this far (VHD's table is read in whole sectors)
	blockSize uint64 // guest bytes per block
	prefix    uint64 // bytes stored ahead of a block's data (VHD's sector bitmap)
	order     binary.ByteOrder
	// locate gives the host offset where block i is stored (prefix, then
	// data) from its table entry e; ok false: not in the file, reads as
	// zeros.
	locate func(i uint64, e uint32) (start uint64, ok bool)
}

func (m *blockMap) tableEnd() uint64 { return m.tableOff + 4*m.entries }
func (m *blockMap) stored() uint64   { return m.prefix + m.blockSize }

// guestLen is how many guest bytes block i holds (the last one may be
// short, blocks past the disk none).
func (m *blockMap) guestLen(i uint64) uint64 {
	g := i * m.blockSize
	if g >= m.vsize {
		return 0
	}
	return min(m.blockSize, m.vsize-g)
}

// blockExtent is one allocated block: where it is stored and which it is.
type blockExtent struct {
	start uint64
	index uint64
}

// extentCost is what the decoder holds per table entry at most (the table
// bytes and an extent), charged against Options.MaxBuffered.
const extentCost = 4 + 16

type blockMapDecoder struct {
	m     blockMap
	out   *output
	kept  retention
	zeros []byte
	pos   uint64 // stream bytes seen
	table []byte
	// parsed: the table is known; exts[next:] are the blocks still to
	// come, in host order, only those inside the disk.
	parsed bool
	exts   []blockExtent
	next   int
	// end is where the furthest stored block ends (all blocks, also those
	// past the disk: qemu and format.CheckVHD/CheckVDI want them in the
	// file); endBlock is that block.
	end, endBlock uint64
	zeroAt        int64 // pending run of guest zeros (unallocated blocks)
	zeroLen       int64
}

// decodeBlockMap streams the image after its header (headEnd bytes, read
// by the caller) from r onto sink.
func decodeBlockMap(ctx context.Context, r io.Reader, m blockMap, sink Sink, o Options) (st Stats, err error) {
	st.VirtualSize = int64(m.vsize)
	if m.tableOff < m.headEnd {
		// No writer does this, and qemu would read the table out of the
		// header itself: not guessed at here.
		return st, fmt.Errorf("%s: block table at offset %d lies inside the %d-byte header: %w", m.name, m.tableOff, m.headEnd, errdefs.ErrNotStreamable)
	}
	if cost := int64(m.entries) * extentCost; cost > o.MaxBuffered {
		return st, fmt.Errorf("%s: a block table of %d entries needs %d bytes, more than the %d-byte buffer: %w", m.name, m.entries, cost, o.MaxBuffered, errdefs.ErrNotStreamable)
	}
	d := &blockMapDecoder{
		m:     m,
		pos:   m.headEnd,
		kept:  newRetention(o.MaxBuffered-int64(m.entries)*extentCost, o.SpillDir),
		zeros: make([]byte, 64<<10),
		table: make([]byte, 4*m.entries),
	}
	defer d.kept.close()
	d.out = newOutput(ctx, sink, 4*o.Workers)
	defer func() {
		if werr := d.out.close(); err == nil && werr != nil {
			err = werr
		}
		st.DataBytes = d.out.data
		st.PeakBuffered = d.kept.peak
		st.BufferedBytes = d.kept.total
		st.SpilledBytes = d.kept.spill.total
		st.PeakSpilled = d.kept.spill.peak
		st.StreamBytes = int64(d.pos)
	}()
	if err := d.maybeParse(); err != nil {
		return st, err
	}
	chunks := newChunkPool()
	for {
		if err := ctx.Err(); err != nil {
			return st, fmt.Errorf("%s: %w: %w", m.name, errdefs.ErrCancelled, err)
		}
		if d.out.failed.Load() {
			return st, nil // the deferred close returns the output's error
		}
		c := chunks.get()
		n, eof, err := iostage.ReadChunk(r, c.buf)
		if err == nil {
			err = d.feed(c.buf[:n], c)
		}
		c.unref()
		if err != nil {
			return st, err
		}
		if eof {
			return st, d.finish()
		}
	}
}

// feed takes the stream bytes p at d.pos, held in c.
func (d *blockMapDecoder) feed(p []byte, c *chunk) error {
	for len(p) > 0 && !d.parsed {
		var n uint64
		if d.pos < d.m.tableOff {
			// Ahead of the table: a block may lie here.
			n = min(uint64(len(p)), d.m.tableOff-d.pos)
			if err := d.kept.add(d.pos, p[:n], d.zeros); err != nil {
				return fmt.Errorf("%s: %w", d.m.name, err)
			}
		} else {
			n = min(uint64(len(p)), d.m.tableEnd()-d.pos)
			copy(d.table[d.pos-d.m.tableOff:], p[:n])
		}
		d.pos += n
		p = p[n:]
		if err := d.maybeParse(); err != nil {
			return err
		}
	}
	if len(p) == 0 {
		return nil
	}
	d.blocks(p, c)
	d.pos += uint64(len(p))
	return nil
}

// blocks hands the blocks' data in p (at d.pos) to the output.
func (d *blockMapDecoder) blocks(p []byte, c *chunk) {
	base, end := d.pos, d.pos+uint64(len(p))
	for d.next < len(d.exts) {
		e := d.exts[d.next]
		data := e.start + d.m.prefix
		dataEnd := data + d.m.guestLen(e.index)
		if data >= end {
			return
		}
		if a, b := max(data, base), min(dataEnd, end); a < b {
			d.send(int64(e.index*d.m.blockSize+a-data), p[a-base:b-base], c)
		}
		if dataEnd > end {
			return
		}
		d.next++
	}
}

// zeroPiece is the granularity at which zeros in a block are not written
// to a target that reads zeros anyway: qemu-img convert's (its -S 4k).
const zeroPiece = 4 << 10

// send queues the guest bytes p at off (p lies in c, or nothing needs
// releasing when c is nil). A target that reads zeros where nothing is
// written gets only the 4 KiB pieces that hold data: VHD and VDI blocks
// are big (2 MiB, 1 MiB) and mostly zeros where the guest never wrote, and
// writing those zeros would cost as much as the data.
func (d *blockMapDecoder) send(off int64, p []byte, c *chunk) {
	queue := func(off int64, p []byte) {
		x := &op{off: off, p: p}
		if c != nil {
			c.ref()
			x.chunk = c
		}
		d.out.send(x)
	}
	if d.out.zeroer != nil {
		queue(off, p)
		return
	}
	run := -1 // start in p of the data run being gathered
	for i := 0; i < len(p); {
		n := min(zeroPiece-int((off+int64(i))%zeroPiece), len(p)-i)
		zero := isZeroBytes(p[i:i+n], d.zeros)
		switch {
		case zero && run >= 0:
			queue(off+int64(run), p[run:i])
			run = -1
		case !zero && run < 0:
			run = i
		}
		i += n
	}
	if run >= 0 {
		queue(off+int64(run), p[run:])
	}
}

func (d *blockMapDecoder) maybeParse() error {
	if d.parsed || d.pos < d.m.tableEnd() {
		return nil
	}
	d.parsed = true
	return d.parse()
}

// parse reads the table: zeros for the blocks not in the file, the
// structural checks on the others, and the blocks that already passed
// served from the kept bytes.
func (d *blockMapDecoder) parse() error {
	m := &d.m
	tEnd := m.tableEnd()
	for i := uint64(0); i < m.entries; i++ {
		start, ok := m.locate(i, m.order.Uint32(d.table[4*i:]))
		if !ok {
			if g := m.guestLen(i); g > 0 {
				d.zero(int64(i*m.blockSize), int64(g))
			}
			continue
		}
		end := start + m.stored()
		switch {
		case start < m.headEnd:
			return d.invalid("block %d is stored at bytes %d..%d, over the %d-byte header", i, start, end, m.headEnd)
		case start < tEnd && end > m.tableOff:
			return d.invalid("block %d is stored at bytes %d..%d, over the block table at %d..%d", i, start, end, m.tableOff, tEnd)
		}
		if end > d.end {
			d.end, d.endBlock = end, i
		}
		d.exts = append(d.exts, blockExtent{start: start, index: i})
	}
	d.flushZero()
	d.table = nil
	slices.SortFunc(d.exts, func(a, b blockExtent) int {
		switch {
		case a.start < b.start:
			return -1
		case a.start > b.start:
			return 1
		}
		return 0
	})
	for k := 1; k < len(d.exts); k++ {
		a, b := d.exts[k-1], d.exts[k]
		if b.start < a.start+m.stored() {
			return d.invalid("blocks %d and %d are stored over the same bytes (at %d and %d, %d bytes each)", a.index, b.index, a.start, b.start, m.stored())
		}
	}
	d.exts = slices.DeleteFunc(d.exts, func(e blockExtent) bool { return m.guestLen(e.index) == 0 })
	// The blocks ahead of the table, all from the kept bytes.
	for d.next < len(d.exts) && d.exts[d.next].start < m.tableOff {
		e := d.exts[d.next]
		data := e.start + m.prefix
		dataEnd := data + m.guestLen(e.index)
		if !d.kept.covers(data, dataEnd) {
			return fmt.Errorf("%s: block %d at bytes %d..%d passed before the block table and was not kept: %w", m.name, e.index, data, dataEnd, errdefs.ErrNotStreamable)
		}
		guest := int64(e.index * m.blockSize)
		err := d.kept.each(data, dataEnd, func(off uint64, p []byte, n uint64) error {
			if p == nil {
				d.out.zero(guest+int64(off-data), int64(n))
			} else {
				d.send(guest+int64(off-data), p, nil)
			}
			return nil
		})
		if err != nil {
			return err
		}
		d.next++
	}
	d.kept.drop(m.headEnd, m.tableOff)
	return nil
}

// zero queues a guest range of zeros, merged with the run before it.
func (d *blockMapDecoder) zero(off, n int64) {
	if d.zeroLen > 0 && d.zeroAt+d.zeroLen == off {
		d.zeroLen += n
		return
	}
	d.flushZero()
	d.zeroAt, d.zeroLen = off, n
}

func (d *blockMapDecoder) flushZero() {
	d.out.zero(d.zeroAt, d.zeroLen)
	d.zeroLen = 0
}

// finish checks that the stream held everything the table names.
func (d *blockMapDecoder) finish() error {
	m := &d.m
	switch {
	case !d.parsed:
		return d.invalid("the %d-byte stream ends before the end of the block table at %d..%d (truncated image?)", d.pos, m.tableOff, m.tableEnd())
	case d.pos < m.tableNeed:
		return d.invalid("the %d-byte stream ends inside the last sector of the block table at %d..%d (truncated image?)", d.pos, m.tableOff, m.tableEnd())
	case d.end > d.pos:
		return d.invalid("block %d is stored at bytes %d..%d, past the end of the %d-byte stream (truncated image?)", d.endBlock, d.end-m.stored(), d.end, d.pos)
	}
	return nil
}

func (d *blockMapDecoder) invalid(format string, a ...any) error {
	return fmt.Errorf("%s: "+format+": %w", append([]any{d.m.name}, append(a, errdefs.ErrInvalidImage)...)...)
}

// chunkPool hands out stream buffers, made as they are first needed: the
// first one small, so a tiny image (a fuzz input, an empty disk) costs
// little, the others chunkBytes.
type chunkPool struct {
	free chan *chunk
	made int
}

func newChunkPool() *chunkPool { return &chunkPool{free: make(chan *chunk, chunkCount)} }

// get returns a buffer holding one reference.
func (p *chunkPool) get() *chunk {
	var c *chunk
	select {
	case c = <-p.free:
	default:
		if p.made < chunkCount {
			size := chunkBytes
			if p.made == 0 {
				size = 64 << 10
			}
			p.made++
			c = &chunk{buf: make([]byte, size), pool: p.free}
		} else {
			c = <-p.free
		}
	}
	c.refs.Store(1)
	return c
}

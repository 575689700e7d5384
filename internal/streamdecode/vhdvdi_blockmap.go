package streamdecode

import (
	"context"
	"fmt"
	"io"
	"slices"
	"unsafe"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/iostage"
)

// blockMap is what a block-map image (dynamic VHD, VDI, VHDX) tells of
// itself in its header: where its tables lie (the block table, and for
// VHDX the metadata needed to read it), which the decoder gathers as they
// pass and then parses into a blockLayout: fixed-size guest blocks, each
// stored somewhere in the file or reading as zeros. Every writer puts the
// tables ahead of the blocks, which follow in any order; blocks that pass
// before the tables are kept (bounded, or spilled) until they are known.
type blockMap struct {
	name  string // "vhd", "vdi", "vhdx": the prefix of messages
	vsize uint64 // when the header says (VHD, VDI); parse's otherwise
	// blockSize and prefix, when the header says (VHD, VDI), bound the
	// spill.
	blockSize, prefix uint64
	headEnd           uint64 // the header, [0, headEnd), already read
	// tables are gathered in stream order; disjoint, none before headEnd.
	tables []span
	// reserved are other structures no block may be stored over (VHDX's
	// log).
	reserved []span
	need     uint64 // the stream must reach at least this far
	// maxBlocks is the most blocks the tables can name: with the tables'
	// bytes, it bounds the memory the decoder needs.
	maxBlocks uint64
	// parse reads the gathered tables into a layout whose blocks are
	// appended to blocks, of capacity maxBlocks (charged in full).
	parse func(tables [][]byte, blocks []blockExtent) (blockLayout, error)
}

// readHead reads the first size bytes of a block-map image, the header the
// decoder parses before any table: head is zero-padded past the n bytes a
// short stream holds. name prefixes the message.
func readHead(r io.Reader, name string, size int) (head []byte, n int, err error) {
	head = make([]byte, size)
	n, _, err = iostage.ReadChunk(r, head)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: read header: %w", name, err)
	}
	return head, n, nil
}

// readHeader reads the first size bytes of a VHD or VDI (zero-padded past
// a short stream's end) and parses them as format f.
func readHeader(r io.Reader, f format.Format, size int, maxVirtualSize int64) ([]byte, format.Header, error) {
	head, n, err := readHead(r, string(f), size)
	if err != nil {
		return nil, format.Header{}, err
	}
	h, err := format.ParseHeaderMax(f, head[:n], maxVirtualSize)
	return head, h, err
}

// span is a named byte range of the file.
type span struct {
	off, end uint64
	what     string
}

// blockLayout is what the tables say.
type blockLayout struct {
	vsize     uint64
	blockSize uint64 // guest bytes per block
	prefix    uint64 // bytes stored ahead of a block's data (VHD's sector bitmap)
	// blocks are those stored in the file, by ascending index; the others
	// read as zeros.
	blocks []blockExtent
	// partialLast: a block holding the end of the disk need only be in the
	// file up to that end (VHDX, as qemu checks it); otherwise every stored
	// block must be whole.
	partialLast bool
}

func (l *blockLayout) stored() uint64 { return l.prefix + l.blockSize }

// guestLen is how many guest bytes block i holds (the last one may be
// short, blocks past the disk none).
func (l *blockLayout) guestLen(i uint64) uint64 {
	g := i * l.blockSize
	if g >= l.vsize {
		return 0
	}
	return min(l.blockSize, l.vsize-g)
}

// required is how far past its start block i must be in the file.
func (l *blockLayout) required(i uint64) uint64 {
	if g := l.guestLen(i); l.partialLast && g > 0 {
		return l.prefix + g
	}
	return l.stored()
}

// blockExtent is one stored block: where it is stored and which it is.
type blockExtent struct {
	start uint64
	index uint64
}

// extentCost is what the decoder holds per block the tables can name (an
// extent), charged with the tables' bytes against Options.MaxBuffered:
// the extents are one array of that capacity, sorted in place, and
// nothing else is allocated per block (3.3 million extents allocated 424
// MiB when the array grew by append, was copied to be sorted and each
// block's check built a slice).
const extentCost = int64(unsafe.Sizeof(blockExtent{}))

type blockMapDecoder struct {
	m    blockMap
	l    blockLayout
	out  *output
	kept retention
	pos  uint64 // stream bytes seen
	bufs [][]byte
	cur  int // the table being gathered
	// parsed: the tables are known; exts[next:] are the blocks still to
	// come, in host order, only those inside the disk.
	parsed bool
	exts   []blockExtent
	next   int
	// end is how far the stream must reach for every stored block (all
	// blocks, also those past the disk: qemu and format.CheckVHD/CheckVDI
	// want them in the file); endBlock is the block that needs it.
	end, endBlock uint64
	zeroAt        int64 // pending run of guest zeros (unallocated blocks)
	zeroLen       int64
}

// decodeBlockMap streams the image after its header (headEnd bytes, read
// by the caller) from r onto sink.
func decodeBlockMap(ctx context.Context, r io.Reader, m blockMap, sink Sink, o Options) (st Stats, err error) {
	st.VirtualSize = int64(m.vsize)
	slices.SortFunc(m.tables, func(a, b span) int { return cmpUint(a.off, b.off) })
	cost := int64(m.maxBlocks) * extentCost
	for i, t := range m.tables {
		if t.off < m.headEnd {
			// No writer does this, and qemu would read the table out of
			// the header itself: not guessed at here.
			return st, fmt.Errorf("%s: %s at offset %d lies inside the %d-byte header: %w", m.name, t.what, t.off, m.headEnd, errdefs.ErrNotStreamable)
		}
		if i > 0 && t.off < m.tables[i-1].end {
			return st, fmt.Errorf("%s: the %s and the %s overlap: %w", m.name, m.tables[i-1].what, t.what, errdefs.ErrInvalidImage)
		}
		cost += int64(t.end - t.off)
	}
	if cost > o.MaxBuffered || cost < 0 {
		return st, fmt.Errorf("%s: its tables (%d blocks) need %d bytes, more than the %d-byte buffer: %w", m.name, m.maxBlocks, cost, o.MaxBuffered, errdefs.ErrNotStreamable)
	}
	d := &blockMapDecoder{
		m:    m,
		l:    blockLayout{vsize: m.vsize},
		pos:  m.headEnd,
		kept: newRetention(o.MaxBuffered-cost, o.SpillDir, m.spillBound(o)),
	}
	for _, t := range m.tables {
		d.bufs = append(d.bufs, make([]byte, t.end-t.off))
	}
	defer d.kept.close()
	d.out = newOutput(ctx, sink, 4*o.Workers)
	defer func() {
		if werr := d.out.close(); err == nil && werr != nil {
			err = werr
		}
		st.VirtualSize = int64(d.l.vsize)
		st.DataBytes = d.out.data
		st.PeakBuffered = d.kept.peak
		st.BufferedBytes = d.kept.total
		st.SpilledBytes = d.kept.spill.total
		st.PeakSpilled = d.kept.spill.peak
		st.StreamBytes = int64(d.pos)
	}()
	if err := d.advance(); err != nil {
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

// spillBound is what the blocks that pass before the tables can
// legitimately need held: every block of the disk once, bitmap included
// (a VHDX's size is known only from its metadata: the target's then).
func (m blockMap) spillBound(o Options) spillBound {
	if m.vsize == 0 || m.blockSize == 0 {
		return newSpillBound(o.TargetSize, o.TargetSize, o.MaxSpill)
	}
	blocks := (m.vsize + m.blockSize - 1) / m.blockSize
	return newSpillBound(int64(blocks*(m.blockSize+m.prefix)), int64(m.vsize), o.MaxSpill)
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// feed takes the stream bytes p at d.pos, held in c.
func (d *blockMapDecoder) feed(p []byte, c *chunk) error {
	for len(p) > 0 && !d.parsed {
		t := d.m.tables[d.cur]
		var n uint64
		if d.pos < t.off {
			// Ahead of a table: a block may lie here, unless it is a
			// reserved structure, where none may.
			n = min(uint64(len(p)), t.off-d.pos)
			skip := false
			for _, r := range d.m.reserved {
				switch {
				case r.off <= d.pos && d.pos < r.end:
					n, skip = min(n, r.end-d.pos), true
				case d.pos < r.off:
					n = min(n, r.off-d.pos)
				}
			}
			if !skip {
				if err := d.kept.add(d.pos, p[:n]); err != nil {
					return fmt.Errorf("%s: %w", d.m.name, err)
				}
			}
		} else {
			n = min(uint64(len(p)), t.end-d.pos)
			copy(d.bufs[d.cur][d.pos-t.off:], p[:n])
		}
		d.pos += n
		p = p[n:]
		if err := d.advance(); err != nil {
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

// advance moves past the tables gathered and parses them when none is
// left.
func (d *blockMapDecoder) advance() error {
	for d.cur < len(d.m.tables) && d.m.tables[d.cur].end <= d.pos {
		d.cur++
	}
	if d.parsed || d.cur < len(d.m.tables) {
		return nil
	}
	d.parsed = true
	return d.parse()
}

// blocks hands the blocks' data in p (at d.pos) to the output.
func (d *blockMapDecoder) blocks(p []byte, c *chunk) {
	base, end := d.pos, d.pos+uint64(len(p))
	for d.next < len(d.exts) {
		e := d.exts[d.next]
		data := e.start + d.l.prefix
		dataEnd := data + d.l.guestLen(e.index)
		if data >= end {
			return
		}
		if a, b := max(data, base), min(dataEnd, end); a < b {
			d.send(int64(e.index*d.l.blockSize+a-data), p[a-base:b-base], c)
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
	// The data runs gathered are written; the zero runs between them only
	// reported (to a HoleSink).
	run, zrun := -1, -1 // starts in p of the data and zero runs being gathered
	for i := 0; i < len(p); {
		n := min(zeroPiece-int((off+int64(i))%zeroPiece), len(p)-i)
		zero := iostage.IsZero(p[i : i+n])
		switch {
		case zero && run >= 0:
			queue(off+int64(run), p[run:i])
			run, zrun = -1, i
		case zero && zrun < 0:
			zrun = i
		case !zero && run < 0:
			if zrun >= 0 {
				d.out.zero(off+int64(zrun), int64(i-zrun))
				zrun = -1
			}
			run = i
		}
		i += n
	}
	if run >= 0 {
		queue(off+int64(run), p[run:])
	}
	if zrun >= 0 {
		d.out.zero(off+int64(zrun), int64(len(p)-zrun))
	}
}

// parse reads the tables: zeros for the blocks not in the file, the
// structural checks on the others, and the blocks that already passed
// served from the kept bytes.
func (d *blockMapDecoder) parse() error {
	l, err := d.m.parse(d.bufs, make([]blockExtent, 0, d.m.maxBlocks))
	d.bufs = nil
	if err != nil {
		return err
	}
	d.l = l
	if l.blockSize == 0 {
		return fmt.Errorf("%s: blocks of 0 bytes: %w", d.m.name, errdefs.ErrInvalidImage)
	}
	if uint64(len(l.blocks)) > d.m.maxBlocks {
		return fmt.Errorf("%s: %d blocks, more than the %d its tables can name: %w", d.m.name, len(l.blocks), d.m.maxBlocks, errdefs.ErrInvalidImage)
	}
	blocks := (l.vsize + l.blockSize - 1) / l.blockSize
	next := uint64(0) // the first block not known to be stored or zero
	structures := slices.Concat(d.m.tables, d.m.reserved)
	for _, e := range l.blocks {
		if e.index < next {
			return fmt.Errorf("%s: block %d listed twice or out of order: %w", d.m.name, e.index, errdefs.ErrInvalidImage)
		}
		for z := next; z < min(e.index, blocks); z++ {
			d.zero(int64(z*l.blockSize), int64(l.guestLen(z)))
		}
		next = e.index + 1
		end := e.start + l.stored()
		if e.start < d.m.headEnd {
			return d.invalid("block %d is stored at bytes %d..%d, over the %d-byte header", e.index, e.start, end, d.m.headEnd)
		}
		for _, t := range structures {
			if e.start < t.end && end > t.off {
				return d.invalid("block %d is stored at bytes %d..%d, over the %s at %d..%d", e.index, e.start, end, t.what, t.off, t.end)
			}
		}
		if need := e.start + l.required(e.index); need > d.end {
			d.end, d.endBlock = need, e.index
		}
	}
	for z := next; z < blocks; z++ {
		d.zero(int64(z*l.blockSize), int64(l.guestLen(z)))
	}
	d.flushZero()
	d.exts, d.l.blocks = l.blocks, nil
	slices.SortFunc(d.exts, func(a, b blockExtent) int { return cmpUint(a.start, b.start) })
	for k := 1; k < len(d.exts); k++ {
		a, b := d.exts[k-1], d.exts[k]
		if b.start < a.start+l.stored() {
			return d.invalid("blocks %d and %d are stored over the same bytes (at %d and %d, %d bytes each)", a.index, b.index, a.start, b.start, l.stored())
		}
	}
	d.exts = slices.DeleteFunc(d.exts, func(e blockExtent) bool { return l.guestLen(e.index) == 0 })
	// The blocks ahead of the last table, all from the kept bytes.
	for d.next < len(d.exts) && d.exts[d.next].start < d.pos {
		e := d.exts[d.next]
		data := e.start + l.prefix
		dataEnd := data + l.guestLen(e.index)
		if !d.kept.covers(data, dataEnd) {
			return fmt.Errorf("%s: block %d at bytes %d..%d passed before the tables and was not kept: %w", d.m.name, e.index, data, dataEnd, errdefs.ErrNotStreamable)
		}
		guest := int64(e.index * l.blockSize)
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
	d.kept.drop(d.m.headEnd, d.pos)
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

// finish checks that the stream held everything the tables name.
func (d *blockMapDecoder) finish() error {
	switch {
	case !d.parsed:
		t := d.m.tables[d.cur]
		return d.invalid("the %d-byte stream ends before the end of the %s at %d..%d (truncated image?)", d.pos, t.what, t.off, t.end)
	case d.pos < d.m.need:
		return d.invalid("the %d-byte stream ends before byte %d, the end of its tables (truncated image?)", d.pos, d.m.need)
	case d.end > d.pos:
		return d.invalid("block %d is stored at bytes %d..%d, past the end of the %d-byte stream (truncated image?)", d.endBlock, d.end-d.l.required(d.endBlock), d.end, d.pos)
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

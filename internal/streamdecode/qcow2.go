package streamdecode

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/buffers"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/iostage"
)

// qcow2 table entry bits (qcow2 specification).
const (
	qcow2Subclusters = 32

	// chunkBytes is the unit read from the stream (at least a cluster);
	// chunkCount of them are read or held at once. Three instead of four
	// took the same time from 127.0.0.1 onto a direct-io loop device (2
	// GiB bench disk, 2 cores, 3 interleaved runs: qcow2.gz 1.23-1.30 s
	// against 1.25-1.34, qcow2 0.80-0.95 against 0.83-0.91, vhd and vdi
	// alike) with 4 MiB less peak RSS (qcow2.gz 90 MiB, under issue 3's
	// 96).
	chunkBytes = 4 << 20
	chunkCount = 3
)

// qcow2Decoder is the state of one qcow2 decode.
type qcow2Decoder struct {
	h           format.Header
	cs          uint64 // cluster size
	vsize       uint64
	l2Entries   uint64
	entrySize   uint64
	sw          sweep
	out         *output
	inf         *inflaters
	outFree     chan []byte
	inPool      *buffers.Pool     // compressed clusters being gathered and inflated
	l2Seen      map[uint64]uint64 // L2 table offset -> L1 index
	snap        snapshots
	refBlockEnd uint64 // end of the furthest refcount block
	compressed  int64
}

// DecodeQCOW2 reads a qcow2 image from r, from its first byte on, and
// writes the guest disk to sink. It returns errdefs.ErrNotStreamable when
// the layout needs more than one forward pass within o.MaxBuffered
// (nothing is then known about the image: fall back to scratch), and
// errdefs.ErrInvalidImage, ErrUnsafeImage or ErrUnsupportedFormat for
// what format.ParseHeader and format.CheckQCOW2 refuse. The sink may have
// received writes when an error is returned.
func DecodeQCOW2(ctx context.Context, r io.Reader, sink Sink, o Options) (Stats, error) {
	o = o.withDefaults()
	head := make([]byte, 512)
	n, eof, err := iostage.ReadChunk(r, head)
	if err != nil {
		return Stats{}, fmt.Errorf("qcow2: read header: %w", err)
	}
	head = head[:n]
	cb := uint32(0)
	if n >= 24 {
		cb = binary.BigEndian.Uint32(head[20:])
	}
	if cb >= 9 && cb <= 21 && !eof {
		// The header extensions fill the rest of the first cluster.
		rest := make([]byte, (1<<cb)-512)
		k, _, err := iostage.ReadChunk(r, rest)
		if err != nil {
			return Stats{}, fmt.Errorf("qcow2: read header: %w", err)
		}
		head = append(head, rest[:k]...)
	}
	h, err := format.ParseHeaderMax(format.QCOW2, head, o.MaxVirtualSize)
	if err != nil {
		return Stats{}, err
	}
	if h.Format != format.QCOW2 {
		return Stats{}, fmt.Errorf("streamdecode: not a qcow2 image: %w", errdefs.ErrInvalidImage)
	}
	d := &qcow2Decoder{
		h:         h,
		cs:        uint64(1) << h.ClusterBits,
		vsize:     uint64(h.VirtualSize),
		entrySize: 8,
		l2Seen:    map[uint64]uint64{},
	}
	if h.ExtendedL2 {
		d.entrySize = 16
	}
	d.l2Entries = d.cs / d.entrySize
	d.sw = sweep{
		pos:         uint64(len(head)),
		meta:        []metaSpan{{0, uint64(len(head))}},
		clusterBits: h.ClusterBits,
		kept:        newRetention(o.MaxBuffered, o.SpillDir, newSpillBound(int64(roundUp(uint64(h.VirtualSize), 1<<h.ClusterBits)), h.VirtualSize, o.MaxSpill)),
		feed:        d.feed,
	}
	defer d.sw.kept.close()
	return d.run(ctx, r, sink, o, head)
}

func (d *qcow2Decoder) run(ctx context.Context, r io.Reader, sink Sink, o Options, head []byte) (st Stats, err error) {
	st.VirtualSize = d.h.VirtualSize
	chunkSize := max(chunkBytes, int(d.cs))
	// The output queue takes every cluster of the stream chunks in the
	// pool, so the decoder reads on while the writes catch up: with 4 ×
	// workers clusters (512 KiB of 64 KiB clusters) it stopped reading
	// whenever they lagged, and so did the decompressor in front of it
	// (an igzip child with its pipe full). 1 GiB over HTTP onto a loop
	// device as a pod, medians of 6 interleaved runs: qcow2.gz 0.96 s
	// instead of 1.17, qcow2.zst 0.76 instead of 0.98, qcow2.xz (xz on
	// both cores) 2.79 against 2.83. The chunks and the inflate buffers
	// bound the memory.
	depth := max(4*o.Workers, chunkCount*chunkSize/int(d.cs))
	codec := codecDeflate
	if d.h.Compressed == "zstd" {
		codec = codecZstd
	}
	d.inf = newInflaters(ctx, codec, o.Workers, int(d.cs), o.InflateChild)
	d.out = newOutput(ctx, sink, depth)
	// Compressed clusters may claim up to two clusters of input.
	nbuf := max(2, min(2*o.Workers+2, int((32<<20)/(3*d.cs))))
	d.outFree = buffers.Circulating(nbuf, int(d.cs), 1)
	d.inPool = buffers.NewPool(int(2*d.cs), nbuf, 1)
	defer func() {
		d.inf.stop()
		if werr := d.out.close(); err == nil && werr != nil {
			err = werr
		}
		st.DataBytes = d.out.data
		st.Compressed = d.compressed
		st.PeakBuffered = d.sw.kept.peak
		st.BufferedBytes = d.sw.kept.total
		st.SpilledBytes = d.sw.kept.spill.total
		st.PeakSpilled = d.sw.kept.spill.peak
		st.StreamBytes = int64(d.sw.pos)
	}()

	if d.h.L1Size == 0 {
		d.out.zero(0, int64(d.vsize))
	} else {
		l1 := &region{start: d.h.L1TableOffset, end: d.h.L1TableOffset + uint64(d.h.L1Size)*8, kind: regL1}
		if err := d.sw.add(l1); err != nil {
			return st, err
		}
	}
	rt := &region{start: d.h.RefcountOffset, end: d.h.RefcountOffset + uint64(d.h.RefcountClusters)*d.cs, kind: regRefTable}
	if err := d.sw.add(rt); err != nil {
		return st, err
	}
	if err := d.startSnapshots(head); err != nil {
		return st, err
	}

	pool := make(chan *chunk, chunkCount)
	for range chunkCount {
		pool <- &chunk{buf: make([]byte, chunkSize), pool: pool}
	}
	for {
		if err := ctx.Err(); err != nil {
			return st, fmt.Errorf("qcow2: %w: %w", errdefs.ErrCancelled, err)
		}
		if d.out.failed.Load() {
			return st, nil // the deferred close returns the output's error
		}
		c := <-pool
		c.refs.Store(1)
		n, eof, err := iostage.ReadChunk(r, c.buf)
		if err == nil {
			err = d.sw.chunkAt(c.buf[:n], c)
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

// finish checks what the stream still owed at its end.
func (d *qcow2Decoder) finish() error {
	size := d.sw.pos
	for _, a := range d.sw.active {
		if a.kind == regCompressed && a.start < size && a.end <= (size+511)&^511 {
			// qemu rounds the last compressed cluster up to a sector.
			if err := d.submitCompressed(a); err != nil {
				return err
			}
			continue
		}
		return d.truncated(a, size)
	}
	if len(d.sw.pending) > 0 {
		return d.truncated(d.sw.pending[0], size)
	}
	if d.refBlockEnd > size {
		return fmt.Errorf("qcow2: a refcount block ends at %#x, past the end of the %d-byte stream (truncated image?): %w", d.refBlockEnd, size, errdefs.ErrInvalidImage)
	}
	return d.finishSnapshots(size)
}

func (d *qcow2Decoder) truncated(a *region, size uint64) error {
	return fmt.Errorf("qcow2: %s at offset %#x..%#x lies past the end of the %d-byte stream (truncated image?): %w", a.kind, a.start, a.end, size, errdefs.ErrInvalidImage)
}

// feed takes the next piece of a region: n bytes at host offset off, p
// nil for zeros, c the buffer p lies in (a stream chunk or a read-back
// buffer of the spill file; nil for bytes retained in memory).
func (d *qcow2Decoder) feed(r *region, off uint64, p []byte, n uint64, c *chunk) error {
	switch r.kind {
	case regData:
		rel := int64(off - r.start)
		if rel >= r.guestLen {
			return nil
		}
		n = min(n, uint64(r.guestLen-rel))
		if p == nil {
			d.out.zero(r.guest+rel, int64(n))
			return nil
		}
		x := &op{off: r.guest + rel, p: p[:n]}
		if c != nil {
			c.ref()
			x.chunk = c
		}
		d.out.send(x)
		return nil
	case regRefBlock:
		return nil
	}
	if r.buf == nil {
		// Allocated when the bytes arrive, not when the region is
		// learnt: a table may name far more regions than are ever in
		// flight.
		if r.kind == regCompressed {
			if err := d.gather(r); err != nil {
				return err
			}
		} else {
			r.buf = make([]byte, r.end-r.start)
		}
	}
	dst := r.buf[off-r.start : off-r.start+n]
	if p == nil {
		clear(dst)
	} else {
		copy(dst, p)
	}
	r.got += n
	if r.got < r.end-r.start {
		return nil
	}
	switch r.kind {
	case regL1:
		return d.parseL1(r.buf)
	case regL2:
		return d.parseL2(r.index, r.buf)
	case regRefTable:
		return d.parseRefTable(r.buf)
	case regCompressed:
		return d.submitCompressed(r)
	case regSnapHeader:
		return d.snapHeader(r, r.buf)
	case regSnapBody:
		return d.nextSnapshot(r.end)
	case regSnapL1:
		return d.snapL1(r, r.buf)
	}
	return nil
}

// minPooledCompressed is the smallest compressed cluster gathered into a
// buffer of the pool (two clusters long) rather than one of its own size:
// up to a sector's worth of tiny ones (a cluster of a repeated byte
// deflates to about 20 bytes) may share a sector and be gathered at once,
// while larger ones overlap at most their neighbours' sectors.
const minPooledCompressed = 4 << 10

// gather gives r, a compressed cluster whose first bytes arrived, its
// buffer, counted against Options.MaxBuffered until its last byte has
// arrived: L2 entries can point any number of clusters at the same bytes,
// and a decoder that gave each its own buffer held 1 GiB of them for a
// 4 MiB image (8192 clusters sharing 128 KiB across a read).
func (d *qcow2Decoder) gather(r *region) error {
	size := int(r.end - r.start)
	if size >= minPooledCompressed && size <= d.inPool.Size() {
		r.buf = d.inPool.Get()[:size]
	} else {
		r.buf = make([]byte, size)
	}
	if err := d.sw.gather(int64(cap(r.buf))); err != nil {
		return fmt.Errorf("qcow2: compressed cluster %d at host offset %#x shares its bytes with more compressed clusters being gathered at once than the memory bound allows: %w", r.index, r.start, err)
	}
	return nil
}

// submitCompressed queues the inflation of a gathered compressed cluster.
func (d *qcow2Decoder) submitCompressed(r *region) error {
	in := r.buf[:r.got]
	r.buf = nil
	d.sw.gathered(int64(cap(in)))
	x := &op{off: r.guest, ready: make(chan struct{}), free: d.outFree}
	x.outBuf = <-d.outFree
	d.out.send(x)
	d.compressed++
	d.inf.jobs <- inflateJob{in: in, inPool: d.inPool, out: x.outBuf[:d.cs], want: int(d.cs), keep: int(r.guestLen), op: x, what: fmt.Sprintf("qcow2 compressed cluster %d", r.index)}
	return nil
}

func (d *qcow2Decoder) parseL1(b []byte) error {
	perL1 := d.l2Entries * d.cs
	for i := uint64(0); i < uint64(d.h.L1Size); i++ {
		off, err := format.QCOW2L1Entry(d.h, i, binary.BigEndian.Uint64(b[i*8:]))
		if err != nil {
			return err
		}
		guest := i * perL1
		if off == 0 {
			d.out.zero(int64(guest), int64(min(perL1, d.vsize-guest)))
			continue
		}
		if j, dup := d.l2Seen[off]; dup {
			return fmt.Errorf("qcow2: L1 entries %d and %d share the L2 table at %#x: %w", j, i, off, errdefs.ErrInvalidImage)
		}
		d.l2Seen[off] = i
		d.sw.fixed += mapEntryCost
		l2 := &region{start: off, end: off + d.cs, kind: regL2, index: i}
		if err := d.sw.add(l2); err != nil {
			return err
		}
	}
	return nil
}

func (d *qcow2Decoder) parseRefTable(b []byte) error {
	for i := uint64(0); i < uint64(len(b))/8; i++ {
		e := binary.BigEndian.Uint64(b[i*8:])
		if e == 0 {
			continue
		}
		if err := format.QCOW2RefTableEntry(d.h, i, e); err != nil {
			return err
		}
		end := e + d.cs
		d.refBlockEnd = max(d.refBlockEnd, end)
		if e < d.sw.pos {
			// Already passed: forget whatever was kept of it.
			d.sw.kept.drop(e, min(e+d.cs, d.sw.pos))
			if end <= d.sw.pos {
				continue
			}
			e = d.sw.pos
		}
		// Skipped, but claimed: otherwise it would be kept as unknown.
		if err := d.sw.add(&region{start: e, end: end, kind: regRefBlock}); err != nil {
			return err
		}
	}
	return nil
}

func (d *qcow2Decoder) parseL2(l1Index uint64, b []byte) error {
	virtualClusters := (d.vsize + d.cs - 1) / d.cs
	first := l1Index * d.l2Entries
	n := min(d.l2Entries, virtualClusters-min(first, virtualClusters))
	zeroStart, zeroLen := int64(0), int64(0)
	zero := func(off, k int64) {
		if zeroLen > 0 && zeroStart+zeroLen == off {
			zeroLen += k
			return
		}
		d.out.zero(zeroStart, zeroLen)
		zeroStart, zeroLen = off, k
	}
	for j := uint64(0); j < n; j++ {
		cluster := first + j
		guest := int64(cluster * d.cs)
		glen := int64(min(d.cs, d.vsize-uint64(guest)))
		c, err := format.QCOW2L2Entry(d.h, cluster, b[j*d.entrySize:])
		if err != nil {
			return err
		}
		switch {
		case c.Compressed:
			err = d.sw.add(&region{start: c.Host, end: c.End, kind: regCompressed, guest: guest, guestLen: glen, index: cluster})
		case !d.h.ExtendedL2 && (c.Host == 0 || c.Zero):
			zero(guest, glen)
		case !d.h.ExtendedL2:
			err = d.sw.add(&region{start: c.Host, end: c.Host + d.cs, kind: regData, guest: guest, guestLen: glen})
		case c.Zero:
			// Reserved with extended L2 entries; what it means is not
			// ours to guess.
			err = fmt.Errorf("qcow2: L2 entry for cluster %d has bit 0 set with extended L2 entries: %w", cluster, errdefs.ErrNotStreamable)
		default:
			err = d.addSubclusters(c, guest, glen, zero)
		}
		if err != nil {
			return err
		}
	}
	d.out.zero(zeroStart, zeroLen)
	return nil
}

// addSubclusters maps a cluster with an extended L2 entry: runs of
// allocated subclusters are read from the file, the rest reads as zeros.
func (d *qcow2Decoder) addSubclusters(c format.QCOW2Cluster, guest, glen int64, zero func(off, n int64)) error {
	allocated, off := c.Allocated, c.Host
	sc := d.cs / qcow2Subclusters
	for k := uint64(0); k < qcow2Subclusters; {
		set := allocated&(1<<k) != 0
		m := k + 1
		for m < qcow2Subclusters && (allocated&(1<<m) != 0) == set {
			m++
		}
		gStart := guest + int64(k*sc)
		gLen := min(int64((m-k)*sc), glen-int64(k*sc))
		if gLen > 0 {
			if set {
				r := &region{start: off + k*sc, end: off + m*sc, kind: regData, guest: gStart, guestLen: gLen}
				if err := d.sw.add(r); err != nil {
					return err
				}
			} else {
				zero(gStart, gLen)
			}
		}
		k = m
	}
	return nil
}

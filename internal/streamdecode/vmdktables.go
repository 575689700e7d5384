package streamdecode

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"

	"github.com/diskimport/engine/errdefs"
)

// bookkeeping charges what a decoder remembers of an image's metadata
// (tables, the grains and tables still to be accounted for) against
// Options.MaxBuffered: past it the decode stops with a bookkeeping
// *BufferError, which a spill directory would not help.
type bookkeeping struct{ max, used, peak int64 }

func (b *bookkeeping) charge(n int64) error {
	b.used += n
	b.peak = max(b.peak, b.used)
	if b.used > b.max {
		return &BufferError{Max: b.max, Need: b.used, Bookkeeping: true}
	}
	return nil
}

func (b *bookkeeping) release(n int64) { b.used -= n }

// vmdkAhead is what the decoder keeps of tables that precede the grains
// (qemu's layout): the header and tables as the stream had them, charged
// whole, and a bit per grain for the grains met. A grain marker is looked
// up through the tables themselves, so nothing is allocated per grain (a
// map entry per expected grain was 50 bytes: 16.4 million grains named by
// 62.5 MiB of tables took 1.1 GB).
type vmdkAhead struct {
	gts   [][]byte // the grain table of each directory entry (nil: none)
	gtes  uint64
	named int64    // grains the tables name
	met   []uint64 // by grain index: its marker passed
	metN  int64
}

// lookup is the sector grain g's table entry names (0: none).
func (a *vmdkAhead) lookup(g uint64) uint64 {
	i, j := g/a.gtes, g%a.gtes
	if i >= uint64(len(a.gts)) || a.gts[i] == nil {
		return 0
	}
	return uint64(binary.LittleEndian.Uint32(a.gts[i][4*j:]))
}

// tablesAhead reads the grain directory and tables a header points to;
// they must lie before the first grain (in the overhead), where they are
// seen before any grain passes.
func (d *vmdkDecoder) tablesAhead() error {
	h := d.h
	end := h.overhead * vmdkSector
	if int64(end) > max(d.book.max, 1<<20) {
		return fmt.Errorf("vmdk: %d bytes of header and tables ahead of the grains: %w", end, errdefs.ErrNotStreamable)
	}
	inner := d.br
	head, err := d.br.Peek(int(end))
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			d.br = bufio.NewReaderSize(inner, int(end))
			head, err = d.br.Peek(int(end))
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return d.invalid("stream of %d bytes ends inside the %d bytes of header and tables", len(head), end)
			}
			return err
		}
	}
	if d.br == inner {
		// head lies in the buffer the stream goes on through.
		head = bytes.Clone(head)
	}
	le := binary.LittleEndian
	ahead := func(what string, sector, n uint64) ([]byte, error) {
		if sector == 0 {
			return nil, d.invalid("%s overlaps the header", what)
		}
		if sector > end/vmdkSector || sector*vmdkSector+n > end {
			if what == "grain directory" {
				return nil, errTablesBehind
			}
			return nil, fmt.Errorf("vmdk: %s at sector %d lies after the first grain: %w", what, sector, errdefs.ErrNotStreamable)
		}
		return head[sector*vmdkSector : sector*vmdkSector+n], nil
	}
	coverage := uint64(h.gtesPerGT) * h.grain
	entries := (h.capacity + coverage - 1) / coverage
	gd, err := ahead("grain directory", h.gdOffset, entries*4)
	if err != nil {
		return err
	}
	if h.flags&vmdkFlagRGD != 0 && h.rgdOffset != 0 {
		if _, err := ahead("redundant grain directory", h.rgdOffset, entries*4); err != nil {
			return err
		}
	}
	grains := (d.capB + d.grainB - 1) / d.grainB
	// The head, the table of tables, the bits of the grains met, and for
	// a moment the sorted directory.
	if err := d.book.charge(int64(end) + int64(entries)*(24+4) + int64(grains+63)/64*8); err != nil {
		return err
	}
	sorted := make([]uint32, 0, entries)
	a := &vmdkAhead{gts: make([][]byte, entries), gtes: uint64(h.gtesPerGT), met: make([]uint64, (grains+63)/64)}
	for i := uint64(0); i < entries; i++ {
		gts := uint64(le.Uint32(gd[i*4:]))
		if gts == 0 {
			continue
		}
		sorted = append(sorted, uint32(gts))
		gt, err := ahead("grain table", gts, a.gtes*4)
		if err != nil {
			return err
		}
		a.gts[i] = gt
		for j := uint64(0); j < a.gtes; j++ {
			g := i*a.gtes + j
			if g >= grains {
				break
			}
			s := uint64(le.Uint32(gt[j*4:]))
			if s == 0 || (s == vmdkGTEZeroed && h.flags&vmdkFlagZeroGrain != 0) {
				continue
			}
			if s < h.overhead {
				return d.invalid("grain %d at sector %d overlaps the header or tables", g, s)
			}
			a.named++
		}
	}
	slices.Sort(sorted)
	for k := 1; k < len(sorted); k++ {
		if sorted[k] == sorted[k-1] {
			return d.invalid("grain directory entries share the grain table at sector %d", sorted[k])
		}
	}
	d.book.release(int64(entries) * 4)
	if d.br != inner {
		// Only the tables are kept of the big buffer; the stream goes on
		// through the ordinary one.
		if _, err := d.br.Discard(int(end)); err != nil {
			return err
		}
		d.br, d.pos = inner, end
	}
	d.ahead = a
	return nil
}

// errTablesBehind: the header's grain directory follows the grains.
var errTablesBehind = errors.New("grain directory after the grains")

// meetAhead reports whether the grain marker at sector, marked as guest
// sector lba, is the one the tables name for it; qemu reads no other.
func (d *vmdkDecoder) meetAhead(sector, lba uint64) bool {
	g := lba / d.h.grain
	if d.ahead.lookup(g) != sector {
		return false
	}
	bit := uint64(1) << (g % 64)
	if d.ahead.met[g/64]&bit != 0 {
		return false
	}
	d.ahead.met[g/64] |= bit
	d.ahead.metN++
	return true
}

// missingAhead names a grain the tables name and the stream did not carry.
func (d *vmdkDecoder) missingAhead() error {
	a := d.ahead
	grains := (d.capB + d.grainB - 1) / d.grainB
	for g := uint64(0); g < grains; g++ {
		s := a.lookup(g)
		if s == 0 || (s == vmdkGTEZeroed && d.h.flags&vmdkFlagZeroGrain != 0) || a.met[g/64]&(1<<(g%64)) != 0 {
			continue
		}
		return d.invalid("grain table entry %d points to sector %d, where the %d-byte stream holds no grain marker for it (truncated image, or entries sharing a grain?)", g, s, d.pos)
	}
	return d.invalid("the tables name %d grains, the stream carried %d", a.named, a.metN)
}

// vmdkPending is a grain that passed before the grain table mapping it
// (VMware's layout); lba is vmdkClaimed once a table did.
type vmdkPending struct{ sector, lba uint64 }

const vmdkClaimed = ^uint64(0)

// vmdkTable is a grain table that passed: its sector and the directory
// entry its grains belong to (-1: it maps none).
type vmdkTable struct {
	sector uint64
	index  int64
}

// Bookkeeping per grain awaiting its table, and per table seen.
const (
	vmdkPendingCost = 16
	vmdkTableCost   = 16
)

// addPending remembers a grain that passed before its table; markers come
// in stream order, so pending stays sorted by sector.
func (d *vmdkDecoder) addPending(sector, lba uint64) error {
	d.pending = append(d.pending, vmdkPending{sector, lba})
	return d.book.charge(vmdkPendingCost)
}

// claim takes the pending grain at sector for a table: its lba, or false.
func (d *vmdkDecoder) claim(sector uint64) (uint64, bool) {
	k := sort.Search(len(d.pending), func(i int) bool { return d.pending[i].sector >= sector })
	if k == len(d.pending) || d.pending[k].sector != sector || d.pending[k].lba == vmdkClaimed {
		return 0, false
	}
	lba := d.pending[k].lba
	d.pending[k].lba = vmdkClaimed
	d.claimed++
	return lba, true
}

// compactPending forgets the claimed grains once they are the most.
func (d *vmdkDecoder) compactPending() {
	if d.claimed*2 < len(d.pending) {
		return
	}
	d.book.release(int64(d.claimed) * vmdkPendingCost)
	d.pending = slices.DeleteFunc(d.pending, func(p vmdkPending) bool { return p.lba == vmdkClaimed })
	if cap(d.pending) > 4*len(d.pending)+1024 {
		d.pending = slices.Clip(d.pending)
	}
	d.claimed = 0
}

// unclaimed is a grain no table mapped, or false.
func (d *vmdkDecoder) unclaimed() (uint64, bool) {
	for _, p := range d.pending {
		if p.lba != vmdkClaimed {
			return p.sector, true
		}
	}
	return 0, false
}

// addTable remembers a grain table that passed (tables come in stream
// order, so the list stays sorted by sector).
func (d *vmdkDecoder) addTable(sector uint64, index int64) error {
	d.tables = append(d.tables, vmdkTable{sector, index})
	return d.book.charge(vmdkTableCost)
}

// table finds the table at sector: its position in d.tables, or -1.
func (d *vmdkDecoder) table(sector uint64) int {
	k := sort.Search(len(d.tables), func(i int) bool { return d.tables[i].sector >= sector })
	if k == len(d.tables) || d.tables[k].sector != sector {
		return -1
	}
	return k
}

package streamdecode

import (
	"encoding/binary"
	"fmt"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/format"
)

// Internal snapshots of a qcow2 are not decoded (only the active layer
// is the disk), but their table is what qemu reads when it opens the
// image and what qemu-img check, on the scratch route, walks: the same
// refusals apply here as the bytes pass. Limits are qemu's
// (block/qcow2.h): QCOW_MAX_SNAPSHOT_EXTRA_DATA, QCOW_MAX_SNAPSHOTS_SIZE,
// QCOW_MAX_L1_SIZE.
const (
	qcow2SnapHeaderLen    = 40
	qcow2SnapMaxExtra     = 1024
	qcow2SnapMaxTableSize = 1024 * 65536
	qcow2SnapMinExtraV3   = 16 // vm_state_size_large and disk_size
	qcow2MaxL1Bytes       = 32 << 20
)

// snapshots is the walk of the snapshot table: one entry at a time, its
// fixed part then the rest, since each entry's length is in its fixed
// part.
type snapshots struct {
	count   uint32 // entries in the table (header)
	offset  uint64 // the table (header)
	next    uint32 // index of the entry being read
	at      uint64 // host offset of the entry being read
	l2End   uint64 // furthest end of an L2 table a snapshot's L1 names
	l2Index uint64 // that L1 entry, for the error
}

// startSnapshots registers the first entry of the snapshot table the
// header names (nb_snapshots at 60, snapshots_offset at 64).
func (d *qcow2Decoder) startSnapshots(head []byte) error {
	d.snap.count = binary.BigEndian.Uint32(head[60:])
	d.snap.offset = binary.BigEndian.Uint64(head[64:])
	if d.snap.count == 0 {
		return nil
	}
	// qcow2_validate_table: the offset is used as a signed 64-bit value.
	if d.snap.offset > 1<<62 {
		return fmt.Errorf("qcow2: snapshot table offset %#x invalid: %w", d.snap.offset, errdefs.ErrInvalidImage)
	}
	d.snap.at = d.snap.offset
	return d.sw.add(&region{start: d.snap.at, end: d.snap.at + qcow2SnapHeaderLen, kind: regSnapHeader})
}

// snapHeader checks the fixed part of entry d.snap.next and registers
// the rest of it and the snapshot's L1 table.
func (d *qcow2Decoder) snapHeader(r *region, b []byte) error {
	be := binary.BigEndian
	i := d.snap.next
	l1Off, l1Size := be.Uint64(b[0:]), uint64(be.Uint32(b[8:]))
	idLen, nameLen := uint64(be.Uint16(b[12:])), uint64(be.Uint16(b[14:]))
	extra := uint64(be.Uint32(b[36:]))
	switch {
	case extra > qcow2SnapMaxExtra:
		// qemu refuses to open the image ("Too much extra metadata").
		return fmt.Errorf("qcow2: snapshot table entry %d has %d bytes of extra data, more than qemu's %d: %w", i, extra, qcow2SnapMaxExtra, errdefs.ErrInvalidImage)
	case d.h.QCOW2Version >= 3 && extra < qcow2SnapMinExtraV3:
		// qemu-img check: "snapshot table entry is incomplete".
		return fmt.Errorf("qcow2: snapshot table entry %d has %d bytes of extra data, a version 3 image needs %d: %w", i, extra, qcow2SnapMinExtraV3, errdefs.ErrInvalidImage)
	case l1Off%d.cs != 0:
		return fmt.Errorf("qcow2: snapshot %d: L1 table offset %#x not cluster aligned: %w", i, l1Off, errdefs.ErrInvalidImage)
	case l1Size*8 > qcow2MaxL1Bytes:
		return fmt.Errorf("qcow2: snapshot %d: L1 table of %d entries exceeds qemu's limit: %w", i, l1Size, errdefs.ErrInvalidImage)
	}
	body := r.end
	end := body + extra + idLen + nameLen
	if end-d.snap.offset > qcow2SnapMaxTableSize {
		return fmt.Errorf("qcow2: snapshot table of more than %d bytes: %w", qcow2SnapMaxTableSize, errdefs.ErrInvalidImage)
	}
	if l1Size > 0 {
		if err := d.sw.add(&region{start: l1Off, end: l1Off + l1Size*8, kind: regSnapL1, index: uint64(i)}); err != nil {
			return err
		}
	}
	if end == body {
		return d.nextSnapshot(end)
	}
	return d.sw.add(&region{start: body, end: end, kind: regSnapBody, index: uint64(i)})
}

// nextSnapshot registers the entry after the one ending at end (entries
// are 8-byte aligned).
func (d *qcow2Decoder) nextSnapshot(end uint64) error {
	d.snap.next++
	if d.snap.next >= d.snap.count {
		return nil
	}
	d.snap.at = (end + 7) &^ 7
	return d.sw.add(&region{start: d.snap.at, end: d.snap.at + qcow2SnapHeaderLen, kind: regSnapHeader})
}

// snapL1 checks a snapshot's L1 table as qemu-img check does: every L2
// table it names is cluster aligned and starts inside the file (checked
// at the end of the stream). The L2 tables themselves, and the clusters
// only they map, are not read.
func (d *qcow2Decoder) snapL1(r *region, b []byte) error {
	for j := uint64(0); j < uint64(len(b))/8; j++ {
		off := binary.BigEndian.Uint64(b[j*8:]) & format.QCOW2EntryOffsetMask
		if off == 0 {
			continue
		}
		if off%d.cs != 0 {
			return fmt.Errorf("qcow2: snapshot %d: L1 entry %d: L2 table offset %#x not cluster aligned: %w", r.index, j, off, errdefs.ErrInvalidImage)
		}
		if off+d.cs > d.snap.l2End {
			d.snap.l2End, d.snap.l2Index = off+d.cs, r.index
		}
	}
	return nil
}

// finishSnapshots checks, at the end of the stream of size bytes, what
// the snapshot table named beyond the regions read: qemu-img check counts
// a reference that ends a cluster or more past the end of the file as a
// corruption.
func (d *qcow2Decoder) finishSnapshots(size uint64) error {
	if d.snap.l2End >= size+d.cs {
		return fmt.Errorf("qcow2: snapshot %d names an L2 table at %#x, past the end of the %d-byte stream (truncated image?): %w",
			d.snap.l2Index, d.snap.l2End-d.cs, size, errdefs.ErrInvalidImage)
	}
	return nil
}

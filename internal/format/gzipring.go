package format

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
)

// InflateChildPath is the diskimport-inflate binary o names or PATH
// holds, "" when there is none (o.InflateChild "-", or none on PATH):
// the project's own decoder child (native/inflate: ISA-L's inflate and
// liblzma), which writes what it decodes into shared memory the importer
// reads in place, so no pipe carries the decoded bytes. Without it gzip
// goes through igzip's pipe or the Go decoder, xz through xz's pipe or
// the Go decoder, and grains and clusters through Go's inflate. On the 2 GiB bench raw.gz (35 % data) the pipe out of
// igzip cost about a quarter of an import's CPU-seconds (its copies, page
// allocation and memcg charging, the lock), measured by perf; decoding
// into the ring took the system time of decoding and reading 2 GiB from
// 1.6-1.75 s to 0.10 s, the user time unchanged.
func (o Options) InflateChildPath() string {
	return externalTool(o.InflateChild, "diskimport-inflate")
}

// The ring: ringSlots slots of ringSlotBytes in one shared memory file. Four
// slots let the child decode two ahead while the importer reads one and
// hands one back, and keep the ring small in a pod's memory (16 MiB).
const (
	ringSlotBytes = 4 << 20
	ringSlots     = 4
	// ringRecordSize is a "filled" record: uint32 slot, uint32 length,
	// native order (ringNoSlot and a reason for a block that failed). A
	// "free" record is the slot alone.
	ringRecordSize = 8
	ringNoSlot     = 0xffffffff
	// inflateRingAddressSpace is the child's RLIMIT_AS beside its ring:
	// its binary and libraries, a 1 MiB input buffer and ISA-L's inflate
	// state (VmPeak 10.5 MiB with the 16 MiB ring mapped).
	inflateRingAddressSpace = 48 << 20
	// inflateGzipAddressSpace is the gzip child's, with both rings.
	inflateGzipAddressSpace = inflateRingAddressSpace + ringSlotBytes*ringSlots + inRingSlotBytes*inRingSlots
)

// startInflateRing decodes gzip with diskimport-inflate, which checks every
// member's CRC32 and ISIZE and decodes concatenated members; like igzip it
// ignores bytes after the last member that do not start another one.
func startInflateRing(ctx context.Context, bin string, src *sourceReader, o Options) (*childProc, error) {
	return startChild(ctx, childSpec{name: "gzip", bin: bin,
		args: []string{"gzip", strconv.Itoa(ringSlotBytes), strconv.Itoa(ringSlots),
			strconv.Itoa(inRingSlotBytes), strconv.Itoa(inRingSlots)},
		addressSpace: inflateGzipAddressSpace, processes: 1,
		failed: inflateRingFailed, ring: true, inputRing: true}, src, o)
}

// inflateRingFailed maps diskimport-inflate's failure messages.
func inflateRingFailed(msg string, err error) error {
	msg = strings.TrimPrefix(msg, "diskimport-inflate: ")
	if strings.Contains(msg, "unexpected end of input") {
		return fmt.Errorf("gzip: unexpected end of stream (truncated?): %s: %w", msg, errdefs.ErrInvalidImage)
	}
	return fmt.Errorf("gzip: %s (%v): %w", msg, err, errdefs.ErrInvalidImage)
}

// ringReader reads a decoder child's output out of its ring: the child
// announces each slot it filled on a pipe (the child's stdout), the
// reader copies the slot's bytes out and hands the slot back on another
// pipe (the child's descriptor 4). The copy is one memcpy, and it keeps
// what the later stages see fixed: the child can write into the ring at
// any time, so bytes read in place could change between the hash and the
// write.
type ringReader struct {
	records          *os.File      // the child's "filled" records
	recs             *bufio.Reader // records, as many read at once as have come
	free             *os.File      // our "free" records to the child
	rec              [ringRecordSize]byte
	slotBytes, slots int
	slot             int // the slot being read, -1 when none
	dataOff, dataLen int // its unread bytes in ring
	ring             sharedMapping
}

// newRingReader makes a ring of slots slots of slotBytes and returns its
// reader, and the child's ends: its stdout (the records it writes) and
// its descriptors 3 (the ring) and 4 (the slots handed back). The caller
// closes the child's ends once the child holds them.
func newRingReader(slotBytes, slots int) (r *ringReader, stdout *os.File, extra []*os.File, err error) {
	size := slotBytes * slots
	fd, err := unix.MemfdCreate("diskimport-inflate-ring", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, nil, nil, os.NewSyscallError("memfd_create", err)
	}
	mem := os.NewFile(uintptr(fd), "ring")
	// Sealed at its size: a child that truncated the ring would make our
	// reads of it fault (SIGBUS) instead of fail.
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		mem.Close()
		return nil, nil, nil, os.NewSyscallError("ftruncate", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		mem.Close()
		return nil, nil, nil, os.NewSyscallError("sealing the ring", err)
	}
	ring, err := unix.Mmap(fd, 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		mem.Close()
		return nil, nil, nil, os.NewSyscallError("mmap", err)
	}
	recR, recW, err := os.Pipe()
	if err != nil {
		mem.Close()
		_ = unix.Munmap(ring)
		return nil, nil, nil, err
	}
	freeR, freeW, err := os.Pipe()
	if err != nil {
		mem.Close()
		_ = unix.Munmap(ring)
		recR.Close()
		recW.Close()
		return nil, nil, nil, err
	}
	// Records read as many at a time as the child wrote: a block child
	// writes one per 64 KiB grain, and a read(2) each was a wakeup each.
	return &ringReader{records: recR, recs: bufio.NewReaderSize(recR, 512*ringRecordSize), free: freeW,
		slotBytes: slotBytes, slots: slots, slot: -1, ring: sharedMapping{mem: ring}}, recW, []*os.File{mem, freeR}, nil
}

func (r *ringReader) Read(p []byte) (int, error) {
	for r.dataLen == 0 {
		if r.slot >= 0 {
			r.release(r.slot)
			r.slot = -1
		}
		slot, n, err := r.next()
		if err != nil {
			return 0, err
		}
		if slot < 0 {
			return 0, fmt.Errorf("the decoder reported a failed block in a stream")
		}
		r.slot, r.dataOff, r.dataLen = slot, slot*r.slotBytes, n
	}
	return r.copyOut(p)
}

// next reads the child's next record: a slot and the bytes it holds, or
// no slot (-1) and the reason a block failed. Everything the child names
// is checked against the ring.
func (r *ringReader) next() (slot, n int, err error) {
	if _, err := io.ReadFull(r.recs, r.rec[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			err = fmt.Errorf("a cut record from the decoder: %w", err)
		}
		return 0, 0, err
	}
	s, v := binary.NativeEndian.Uint32(r.rec[:4]), binary.NativeEndian.Uint32(r.rec[4:])
	if s == ringNoSlot {
		return -1, int(v), nil
	}
	if int64(s) >= int64(r.slots) || v == 0 || int64(v) > int64(r.slotBytes) {
		return 0, 0, fmt.Errorf("the decoder named %d bytes in slot %d, outside its ring of %d slots of %d", v, s, r.slots, r.slotBytes)
	}
	return int(s), int(v), nil
}

// release hands slot back to the child. A child that went away makes
// this fail; its end of the records then reads as EOF and its exit
// status says why.
func (r *ringReader) release(slot int) {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], uint32(slot))
	_, _ = r.free.Write(b[:])
}

// copySlot copies slot's first n bytes into out (as many as fit),
// unless the ring was closed meanwhile.
func (r *ringReader) copySlot(out []byte, slot, n int) (int, error) {
	return r.ring.copyOut(out, slot*r.slotBytes, n)
}

// copyOut copies the current slot's unread bytes into p, unless the ring
// was closed meanwhile.
func (r *ringReader) copyOut(p []byte) (int, error) {
	n, err := r.ring.copyOut(p, r.dataOff, r.dataLen)
	r.dataOff += n
	r.dataLen -= n
	return n, err
}

// Close ends the reading: a Read blocked on the records returns, and the
// ring is unmapped once no copy is in progress.
func (r *ringReader) Close() error {
	err := r.records.Close()
	r.free.Close()
	r.ring.unmap()
	return err
}

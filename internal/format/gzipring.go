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
	// uint64 zeros (bit i: the slot's ringZeroGranule bytes at i times
	// that are all zeros), native order (ringNoSlot and a reason for a
	// block that failed). A "free" record is the slot alone.
	ringRecordSize = 16
	ringNoSlot     = 0xffffffff
	// ringZeroGranule is the granule a record's zeros name: the writer's
	// and the content digest's, so a run of them is taken whole.
	ringZeroGranule = 64 << 10
	// inflateRingAddressSpace is the child's RLIMIT_AS beside its ring:
	// its binary and libraries, a 1 MiB input buffer and ISA-L's inflate
	// state (VmPeak 10.5 MiB with the 16 MiB ring mapped).
	inflateRingAddressSpace = 48 << 20
	// inflateGzipAddressSpace is the gzip child's, with both rings.
	inflateGzipAddressSpace = inflateRingAddressSpace + ringSlotBytes*ringSlots + inRingSlotBytes*inRingSlots
)

// inflateProtocol is the ring protocol this importer speaks with
// diskimport-inflate (native/inflate/main.c), its first argument: 2 since
// the result records name granules of zeros (16 bytes). A build that
// speaks another refuses it, and the import fails naming the program,
// rather than reading its records wrong.
const inflateProtocol = "2"

// otherProtocolFailed is failed, but for a diskimport-inflate at bin that
// refused the protocol (a build of another version: an old one answers
// with its usage, a newer one names the protocol it wants).
func otherProtocolFailed(bin string, failed func(msg string, err error) error) func(msg string, err error) error {
	return func(msg string, err error) error {
		m := strings.TrimPrefix(msg, "diskimport-inflate: ")
		if strings.HasPrefix(m, "usage:") || strings.HasPrefix(m, "ring protocol") {
			return fmt.Errorf("%s is another build of diskimport-inflate than this importer's (it speaks ring protocol %s): "+
				"install the one built with it, or turn it off (InflateChild \"-\"): %s: %w", bin, inflateProtocol, m, errdefs.ErrInvalidOptions)
		}
		return failed(msg, err)
	}
}

// startInflateRing decodes gzip with diskimport-inflate, which checks every
// member's CRC32 and ISIZE and decodes concatenated members; like igzip it
// ignores bytes after the last member that do not start another one.
func startInflateRing(ctx context.Context, bin string, src *sourceReader, o Options) (*childProc, error) {
	return startChild(ctx, childSpec{name: "gzip", bin: bin,
		args: []string{"gzip", strconv.Itoa(ringSlotBytes), strconv.Itoa(ringSlots),
			strconv.Itoa(inRingSlotBytes), strconv.Itoa(inRingSlots)},
		addressSpace: inflateGzipAddressSpace, processes: 1,
		failed: inflateRingFailed, ring: true, zeroRuns: true, inputRing: true}, src, o)
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
// write. The granules of zeros the child names are not copied: ReadRun
// gives them as runs (Read as cleared bytes), never reading them, so
// what the child writes there later changes nothing.
type ringReader struct {
	records          *os.File      // the child's "filled" records
	recs             *bufio.Reader // records, as many read at once as have come
	free             *os.File      // our "free" records to the child
	rec              [ringRecordSize]byte
	slotBytes, slots int
	slot             int    // the slot being read, -1 when none
	dataOff, dataLen int    // its unread bytes in ring
	slotEnd          int    // where its bytes end in ring
	zeros            uint64 // its granules the child named as zeros
	zeroRuns         bool   // the child names them (KnowsRuns)
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
	n, zeros, err := r.ReadRun(p)
	if zeros > 0 {
		// At most a slot, and never more than p: ReadRun gives a run
		// from the current position, so the rest of it stays unread.
		k := int(min(zeros, int64(len(p))))
		clear(p[:k])
		r.unread(zeros - int64(k))
		return k, nil
	}
	return n, err
}

// ReadRun is Read, or a run of granules the child named as zeros (n 0,
// zeros > 0): those bytes are passed over, not copied (iostage.RunReader).
func (r *ringReader) ReadRun(p []byte) (n int, zeros int64, err error) {
	for r.dataLen == 0 {
		if r.slot >= 0 {
			r.release(r.slot)
			r.slot = -1
		}
		slot, n, zeros, err := r.next()
		if err != nil {
			return 0, 0, err
		}
		if slot < 0 {
			return 0, 0, fmt.Errorf("the decoder reported a failed block in a stream")
		}
		if !r.zeroRuns {
			zeros = 0 // only the gzip mode names them
		}
		r.slot, r.dataOff, r.dataLen, r.zeros = slot, slot*r.slotBytes, n, zeros
		r.slotEnd = r.dataOff + n
	}
	if len(p) == 0 {
		return 0, 0, nil
	}
	// The current granule and those after it: zeros as a run, data up to
	// the next granule of zeros.
	pos := r.dataOff - r.slot*r.slotBytes
	g := pos / ringZeroGranule
	if r.zeroGranule(g) {
		end := g + 1
		for r.zeroGranule(end) {
			end++
		}
		z := min(end*ringZeroGranule-pos, r.dataLen)
		r.dataOff += z
		r.dataLen -= z
		return 0, int64(z), nil
	}
	end := g + 1
	for end*ringZeroGranule < pos+r.dataLen && !r.zeroGranule(end) {
		end++
	}
	want := min(end*ringZeroGranule-pos, r.dataLen, len(p))
	n, err = r.ring.copyOut(p[:want], r.dataOff, want)
	r.dataOff += n
	r.dataLen -= n
	return n, 0, err
}

// KnowsRuns says whether the child names granules of zeros.
func (r *ringReader) KnowsRuns() bool { return r.zeroRuns }

// zeroGranule says whether the child named granule g of the current slot
// as zeros, and the slot holds all of it.
func (r *ringReader) zeroGranule(g int) bool {
	return g < 64 && r.zeros&(1<<g) != 0 && r.slot*r.slotBytes+(g+1)*ringZeroGranule <= r.slotEnd
}

// unread puts back the last n bytes ReadRun passed over (n at most what
// it just gave).
func (r *ringReader) unread(n int64) {
	r.dataOff -= int(n)
	r.dataLen += int(n)
}

// next reads the child's next record: a slot, the bytes it holds and its
// granules of zeros, or no slot (-1) and the reason a block failed.
// Everything the child names is checked against the ring.
func (r *ringReader) next() (slot, n int, zeros uint64, err error) {
	if _, err := io.ReadFull(r.recs, r.rec[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			err = fmt.Errorf("a cut record from the decoder: %w", err)
		}
		return 0, 0, 0, err
	}
	s, v := binary.NativeEndian.Uint32(r.rec[:4]), binary.NativeEndian.Uint32(r.rec[4:])
	if s == ringNoSlot {
		return -1, int(v), 0, nil
	}
	if int64(s) >= int64(r.slots) || v == 0 || int64(v) > int64(r.slotBytes) {
		return 0, 0, 0, fmt.Errorf("the decoder named %d bytes in slot %d, outside its ring of %d slots of %d", v, s, r.slots, r.slotBytes)
	}
	return int(s), int(v), binary.NativeEndian.Uint64(r.rec[8:]), nil
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

// Close ends the reading: a Read blocked on the records returns, and the
// ring is unmapped once no copy is in progress.
func (r *ringReader) Close() error {
	err := r.records.Close()
	r.free.Close()
	r.ring.unmap()
	return err
}

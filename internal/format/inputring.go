package format

import (
	"encoding/binary"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/internal/iostage"
)

// The gzip child's input ring: inRingSlots slots of inRingSlotBytes in a
// second shared memory file. The feeder reads the compressed stream
// straight into a slot (the source's one copy) and names it to the child
// in a record, so no pipe copies the stream in (a pipe costs two copies,
// page allocation and memcg charging: on a 1000 MiB containerdisk layer
// under 750m the child's reads of its stdin were 9 % of the import's CPU
// by perf). Four slots of 512 KiB: the feeder fills one or two while the
// child decodes one, and the pipe it replaced held 1 MiB.
const (
	inRingSlotBytes = 512 << 10
	inRingSlots     = 4
	// inRecordSize is a record naming input: uint32 slot, uint32 length,
	// native order.
	inRecordSize = 8
)

// inputRing is the feeder's side of the input ring. The file is sealed
// against writers other than this mapping (F_SEAL_FUTURE_WRITE) before
// the child gets it, so the child maps it read-only and cannot change a
// slot's bytes after they were hashed on their way in.
type inputRing struct {
	mem              []byte
	slotBytes, slots int
	free             []int          // slots never handed out yet
	records          io.WriteCloser // our records to the child's stdin
	back             *os.File       // the slots the child hands back (its fd 6)
	rec              [inRecordSize]byte
}

// newInputRing makes the ring and returns it with the child's ends: its
// descriptors 5 (the ring) and 6 (the slots it hands back). The records
// go to stdin, which the caller passes. The caller closes the child's
// ends once the child holds them.
func newInputRing(slotBytes, slots int, stdin io.WriteCloser) (*inputRing, []*os.File, error) {
	mem, memFile, err := sealedInput(slotBytes * slots)
	if err != nil {
		return nil, nil, err
	}
	backR, backW, err := os.Pipe()
	if err != nil {
		_ = unix.Munmap(mem)
		memFile.Close()
		return nil, nil, err
	}
	r := &inputRing{mem: mem, slotBytes: slotBytes, slots: slots, records: stdin, back: backR}
	for s := slots - 1; s >= 0; s-- {
		r.free = append(r.free, s)
	}
	return r, []*os.File{memFile, backW}, nil
}

// sealedInput makes a shared memory file of size bytes for a child's
// input, maps it writable here, and seals it against every later writer
// and against resizing: the child can map it read-only only, so a slot's
// bytes stay what we wrote (and hashed) while the child reads them.
func sealedInput(size int) ([]byte, *os.File, error) {
	fd, err := unix.MemfdCreate("diskimport-inflate-input", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, nil, os.NewSyscallError("memfd_create", err)
	}
	memFile := os.NewFile(uintptr(fd), "input ring")
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		memFile.Close()
		return nil, nil, os.NewSyscallError("ftruncate", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		memFile.Close()
		return nil, nil, os.NewSyscallError("mmap", err)
	}
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_FUTURE_WRITE | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		_ = unix.Munmap(mem)
		memFile.Close()
		return nil, nil, os.NewSyscallError("sealing the input ring", err)
	}
	return mem, memFile, nil
}

// take returns a slot to fill: one never used, else the next the child
// hands back. ok is false once the child is gone or names a slot that
// is not one.
func (r *inputRing) take() (slot int, ok bool) {
	if n := len(r.free); n > 0 {
		slot, r.free = r.free[n-1], r.free[:n-1]
		return slot, true
	}
	var b [4]byte
	if _, err := io.ReadFull(r.back, b[:]); err != nil {
		return 0, false
	}
	s := binary.NativeEndian.Uint32(b[:])
	if int64(s) >= int64(r.slots) {
		return 0, false
	}
	return int(s), true
}

// fill reads the next bytes of src into slot and names them to the child.
// It reports whether there may be more: false at the end of src, on its
// failure (kept by src) and when the child is gone.
func (r *inputRing) fill(src io.Reader, slot int) bool {
	n, eof, err := iostage.ReadChunk(src, r.mem[slot*r.slotBytes:(slot+1)*r.slotBytes])
	if n > 0 {
		binary.NativeEndian.PutUint32(r.rec[:4], uint32(slot))
		binary.NativeEndian.PutUint32(r.rec[4:], uint32(n))
		if _, werr := r.records.Write(r.rec[:]); werr != nil {
			return false
		}
	}
	return !eof && err == nil
}

// close ends the input (the child reads the end of its records) and
// unmaps our side of the ring; the child keeps its own mapping. back
// stays open until the child is reaped (childProc.closeAfterExit).
func (r *inputRing) close() {
	r.records.Close()
	_ = unix.Munmap(r.mem)
}

package nbdserver

import (
	"errors"
	"fmt"
	"io"
	"syscall"

	"github.com/diskimport/engine/internal/buffers"
)

// WritableExport is what a writable export serves. Its methods are called
// concurrently: a client keeps several requests in flight, and the
// protocol leaves the order of overlapping ones to the client.
type WritableExport interface {
	io.ReaderAt
	io.WriterAt
	// ZeroAt makes [off, off+n) read as zeros. mayDeallocate allows
	// freeing the storage (NBD_CMD_WRITE_ZEROES without NO_HOLE, and
	// NBD_CMD_TRIM); fast asks for a way that never falls back to writing
	// zeros, and the export must fail with an error wrapping
	// syscall.ENOTSUP when it has none.
	ZeroAt(off, n int64, mayDeallocate, fast bool) error
	// Sync makes every completed write durable (NBD_CMD_FLUSH).
	Sync() error
}

// errnoOf maps an export's error to the protocol's errno: the client
// reacts to ENOSPC (a full target) and ENOTSUP (no fast zero) and treats
// everything else as an I/O error.
func errnoOf(err error) uint32 {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return errNoSpc
	case errors.Is(err, syscall.ENOTSUP):
		return errNotSup
	case errors.Is(err, syscall.EINVAL):
		return errInval
	case errors.Is(err, syscall.ENOMEM):
		return errNoMem
	}
	return errIO
}

// writeRequest is one write-side command, its payload already read.
type writeRequest struct {
	typ, flags uint16
	off        int64
	n          uint32
	payload    []byte // NBD_CMD_WRITE only
}

// serveWrite runs one write-side command against the writable export and
// returns the errno to reply with. An export failure is remembered for Err
// unless it is the expected "no fast zero here" answer.
func (s *Server) serveWrite(req writeRequest) uint32 {
	var err error
	switch req.typ {
	case cmdWrite:
		_, err = s.writable.WriteAt(req.payload, req.off)
		if err == nil && req.flags&cmdFlagFUA != 0 {
			err = s.writable.Sync()
		}
	case cmdWriteZeroes:
		fast := req.flags&cmdFlagFastZero != 0
		err = s.writable.ZeroAt(req.off, int64(req.n), req.flags&cmdFlagNoHole == 0, fast)
		if fast && errors.Is(err, syscall.ENOTSUP) {
			return errNotSup // the client falls back to slow zeroing
		}
		if err == nil && req.flags&cmdFlagFUA != 0 {
			err = s.writable.Sync()
		}
	case cmdTrim:
		// A trimmed range may read back as anything; zeros are the
		// safest anything for a disk, and deallocating is what a trim is for.
		err = s.writable.ZeroAt(req.off, int64(req.n), true, false)
	case cmdFlush:
		err = s.writable.Sync()
	}
	if err == nil {
		return 0
	}
	s.setErr(fmt.Errorf("nbd command %d of %d bytes at offset %d: %w", req.typ, req.n, req.off, err))
	s.log.Warn("NBD export write failed", "command", req.typ, "offset", req.off, "length", req.n, "err", err)
	return errnoOf(err)
}

// inBounds says whether [off, off+n) lies inside the export.
func (s *Server) inBounds(off uint64, n uint32) bool {
	return off <= uint64(s.wire) && uint64(n) <= uint64(s.wire)-off
}

// bufAlign aligns payload buffers so an export can hand them to O_DIRECT
// writes as they are.
const bufAlign = 4096

// alignedBuf returns an n-byte slice starting on a bufAlign boundary.
func alignedBuf(n int) []byte { return buffers.Aligned(n, bufAlign) }

package nbdserver

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
)

var be = binary.BigEndian

// transmissionFlags: read-only, and several connections see the same
// data, so a client may open more than one.
const transmissionFlags = transHasFlags | transReadOnly | transCanMultiConn

// writableFlags: what qemu's client needs to write a disk without falling
// back to writing zero buffers. No FUA: qemu then flushes instead, which
// it does once at the end of a convert anyway.
const writableFlags = transHasFlags | transSendFlush | transSendTrim | transSendWriteZeroes | transSendFastZero

// handshake runs the fixed newstyle negotiation. ok says the client chose
// the export and transmission follows; false with a nil error is a clean
// NBD_OPT_ABORT.
func (s *Server) handshake(c net.Conn) (ok bool, err error) {
	w := bufio.NewWriter(c)
	r := bufio.NewReader(c)
	var hello [18]byte
	be.PutUint64(hello[0:], nbdMagic)
	be.PutUint64(hello[8:], optMagic)
	be.PutUint16(hello[16:], flagFixedNewstyle|flagNoZeroes)
	if _, err := w.Write(hello[:]); err != nil {
		return false, err
	}
	if err := w.Flush(); err != nil {
		return false, err
	}
	var cf [4]byte
	if _, err := io.ReadFull(r, cf[:]); err != nil {
		return false, fmt.Errorf("reading client flags: %w", err)
	}
	clientFlags := be.Uint32(cf[:])
	if clientFlags&clientFixedNewstyl == 0 || clientFlags&^uint32(clientFixedNewstyl|clientNoZeroes) != 0 {
		return false, fmt.Errorf("client flags %#x not supported", clientFlags)
	}
	noZeroes := clientFlags&clientNoZeroes != 0

	for {
		var h [16]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return false, fmt.Errorf("reading option: %w", err)
		}
		if be.Uint64(h[0:]) != optMagic {
			return false, fmt.Errorf("bad option magic %#x", be.Uint64(h[0:]))
		}
		opt, n := be.Uint32(h[8:]), be.Uint32(h[12:])
		if n > maxOptionLen {
			return false, fmt.Errorf("option %d of %d bytes is too long", opt, n)
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(r, data); err != nil {
			return false, fmt.Errorf("reading option %d: %w", opt, err)
		}
		switch opt {
		case optExportName:
			// No option reply: size, flags and (unless NO_ZEROES) padding.
			out := make([]byte, 10, 10+124)
			be.PutUint64(out[0:], uint64(s.wire))
			be.PutUint16(out[8:], s.flags())
			if !noZeroes {
				out = out[:10+124]
			}
			if _, err := w.Write(out); err != nil {
				return false, err
			}
			return true, w.Flush()
		case optAbort:
			// The client may already have closed; the ack is best effort.
			_ = optReply(w, opt, repAck, nil)
			_ = w.Flush()
			return false, nil
		case optList:
			if n != 0 {
				err = optReply(w, opt, repErrInvalid, []byte("NBD_OPT_LIST takes no data"))
				break
			}
			// One export, listed under the empty (default) name.
			if err = optReply(w, opt, repServer, []byte{0, 0, 0, 0}); err == nil {
				err = optReply(w, opt, repAck, nil)
			}
		case optInfo, optGo:
			var valid bool
			if valid, err = s.infoReply(w, opt, data); err == nil && valid && opt == optGo {
				return true, w.Flush()
			}
		default:
			// STARTTLS, STRUCTURED_REPLY, meta contexts...: simple replies
			// over a private socket are all we offer.
			err = optReply(w, opt, repErrUnsup, nil)
		}
		if err != nil {
			return false, err
		}
		if err := w.Flush(); err != nil {
			return false, err
		}
	}
}

// infoReply answers NBD_OPT_INFO / NBD_OPT_GO: the export's size and flags,
// the block sizes when asked, then an ack. valid is false when the request
// was malformed (an error reply was sent instead).
func (s *Server) infoReply(w *bufio.Writer, opt uint32, data []byte) (valid bool, err error) {
	// u32 name length, name, u16 count, count × u16 info type.
	bad := func() (bool, error) {
		return false, optReply(w, opt, repErrInvalid, []byte("malformed NBD_OPT_INFO/GO request"))
	}
	if len(data) < 6 {
		return bad()
	}
	nameLen := int64(be.Uint32(data))
	if 4+nameLen+2 > int64(len(data)) {
		return bad()
	}
	rest := data[4+nameLen:]
	count := int(be.Uint16(rest))
	rest = rest[2:]
	if len(rest) != 2*count {
		return bad()
	}
	wantBlock := false
	for i := range count {
		if be.Uint16(rest[2*i:]) == infoBlockSize {
			wantBlock = true
		}
	}
	var exp [12]byte
	be.PutUint16(exp[0:], infoExport)
	be.PutUint64(exp[2:], uint64(s.wire))
	be.PutUint16(exp[10:], s.flags())
	if err := optReply(w, opt, repInfo, exp[:]); err != nil {
		return false, err
	}
	if wantBlock {
		var bs [14]byte
		be.PutUint16(bs[0:], infoBlockSize)
		be.PutUint32(bs[2:], s.MinBlock)    // minimum
		be.PutUint32(bs[6:], 4096)          // preferred
		be.PutUint32(bs[10:], s.MaxRequest) // maximum
		if err := optReply(w, opt, repInfo, bs[:]); err != nil {
			return false, err
		}
	}
	return true, optReply(w, opt, repAck, nil)
}

func optReply(w *bufio.Writer, opt, typ uint32, data []byte) error {
	var h [20]byte
	be.PutUint64(h[0:], optReplyMagic)
	be.PutUint32(h[8:], opt)
	be.PutUint32(h[12:], typ)
	be.PutUint32(h[16:], uint32(len(data)))
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := w.Write(data)
	return err
}

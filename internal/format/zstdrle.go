package format

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
)

// rleAsRaw hands klauspost's zstd decoder every RLE block (one byte
// repeated up to 128 KiB, what zstd makes of a run of zeros) as the Raw
// block of the same bytes: the decoder fills an RLE block one byte per
// store, which was 31 % of the CPU of a 1 GiB raw.zst import (65 % zeros,
// perf), while a Raw block's bytes are copied whole. The decoded stream is
// the same, the content checksum too (RFC 8878: a block's type changes
// neither the content nor the entropy tables later blocks repeat).
// Anything that is not a well-formed frame or skippable frame is passed
// through unchanged from there on, for the decoder to refuse.
type rleAsRaw struct {
	r       *bufio.Reader
	pending []byte // bytes to return before reading on
	copyN   int64  // then this many bytes of r, unchanged
	state   rleState
	check   bool   // the current frame ends with a content checksum
	fill    []byte // the Raw block made of an RLE block: header and bytes
	// fillByte and fillLen: fill's first fillLen data bytes are fillByte
	// already, so the next RLE block of that byte (zstd's runs of zeros
	// are one after another) needs only its header written.
	fillByte byte
	fillLen  int
	err      error // sticky: the source's error, or io.EOF
}

type rleState int

const (
	rleFrameStart rleState = iota // at a frame's magic number, or the end
	rleBlock                      // at a block header
	rleFrameEnd                   // after the last block: the checksum
	rlePassAll                    // unknown bytes: everything unchanged
)

const (
	zstdFrameMagic    = 0xFD2FB528
	zstdMaxBlock      = 128 << 10 // Block_Maximum_Size
	zstdBlockRaw      = 0
	zstdBlockRLE      = 1
	zstdBlockReserved = 3
)

func newRLEAsRaw(r io.Reader) *rleAsRaw {
	return &rleAsRaw{r: bufio.NewReaderSize(r, 256<<10)}
}

func (z *rleAsRaw) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if len(z.pending) > 0 {
			n := copy(p, z.pending)
			z.pending = z.pending[n:]
			return n, nil
		}
		if z.copyN > 0 || z.state == rlePassAll {
			want := len(p)
			if z.state != rlePassAll && int64(want) > z.copyN {
				want = int(z.copyN)
			}
			n, err := z.r.Read(p[:want])
			z.copyN -= int64(n)
			if err == io.EOF && z.state != rlePassAll && z.copyN > 0 {
				// Truncated inside a unit: the decoder says so itself.
				z.state = rlePassAll
				err = nil
			}
			if n > 0 || err != nil {
				return n, err
			}
			continue
		}
		if z.err != nil {
			return 0, z.err
		}
		z.step()
	}
}

// step parses the next unit: it sets pending (a header, or a block made
// Raw) and copyN (the unit's bytes that pass unchanged), or a state.
func (z *rleAsRaw) step() {
	switch z.state {
	case rleFrameStart:
		magic, ok := z.take(4)
		if !ok {
			return
		}
		switch m := binary.LittleEndian.Uint32(magic); {
		case m == zstdFrameMagic:
			z.frameHeader(magic)
		case m&zstdSkippableMask == zstdSkippableMagic:
			size, ok := z.take(4)
			if !ok {
				z.pending = magic
				return
			}
			z.pending = append(magic, size...)
			z.copyN = int64(binary.LittleEndian.Uint32(size))
		default:
			z.pending, z.state = magic, rlePassAll
		}
	case rleBlock:
		hdr, ok := z.take(3)
		if !ok {
			return
		}
		h := uint32(hdr[0]) | uint32(hdr[1])<<8 | uint32(hdr[2])<<16
		last, typ, size := h&1 != 0, (h>>1)&3, int64(h>>3)
		if last {
			z.state = rleFrameEnd
		}
		switch {
		case typ == zstdBlockReserved:
			z.pending, z.state = hdr, rlePassAll
		case typ == zstdBlockRLE && size <= zstdMaxBlock:
			v, err := z.r.ReadByte()
			if err != nil {
				z.pending = hdr
				z.fail(err)
				return
			}
			z.pending = z.rawBlock(last, int(size), v)
		case typ == zstdBlockRLE:
			z.pending, z.copyN = hdr, 1 // too large: the decoder refuses it
		default:
			z.pending, z.copyN = hdr, size
		}
	case rleFrameEnd:
		z.state = rleFrameStart
		if z.check {
			z.copyN = 4
		}
	}
}

// frameHeader reads a frame header after its magic number (RFC 8878
// 3.1.1.1: the descriptor, then a window descriptor unless single
// segment, a dictionary ID of 0, 1, 2 or 4 bytes and a content size of 0,
// 1, 2, 4 or 8 bytes) into pending, unchanged.
func (z *rleAsRaw) frameHeader(magic []byte) {
	fhd, err := z.r.ReadByte()
	if err != nil {
		z.pending = magic
		z.fail(err)
		return
	}
	single := fhd&0x20 != 0
	n := [4]int{0, 1, 2, 4}[fhd&3]
	if !single {
		n++
	}
	switch fcs := fhd >> 6; {
	case fcs == 0 && single:
		n++
	case fcs > 0:
		n += 1 << fcs
	}
	rest, ok := z.take(n)
	z.pending = append(append(magic, fhd), rest...)
	if !ok {
		return
	}
	z.check = fhd&0x04 != 0
	z.state = rleBlock
}

// rawBlock returns the Raw block of size bytes v, header included.
func (z *rleAsRaw) rawBlock(last bool, size int, v byte) []byte {
	if z.fill == nil {
		z.fill = make([]byte, 3+zstdMaxBlock)
	}
	h := uint32(size)<<3 | zstdBlockRaw<<1
	if last {
		h |= 1
	}
	b := z.fill[:3+size]
	b[0], b[1], b[2] = byte(h), byte(h>>8), byte(h>>16)
	data := b[3:]
	if v != z.fillByte {
		z.fillByte, z.fillLen = v, 0
	}
	switch {
	case z.fillLen >= len(data):
	case v == 0:
		clear(data[z.fillLen:])
		z.fillLen = len(data)
	default:
		data[0] = v
		for filled := 1; filled < len(data); filled *= 2 {
			copy(data[filled:], data[:filled])
		}
		z.fillLen = len(data)
	}
	return b
}

// take reads exactly n bytes. At the source's end it keeps what it got in
// pending for the decoder, which reports the truncation (or, at a frame
// boundary with nothing read, the clean end).
func (z *rleAsRaw) take(n int) ([]byte, bool) {
	b := make([]byte, n)
	got, err := io.ReadFull(z.r, b)
	if err == nil {
		return b, true
	}
	z.pending = b[:got]
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	z.fail(err)
	return nil, false
}

// fail ends the stream after pending with err (the source's error, or
// io.EOF).
func (z *rleAsRaw) fail(err error) { z.err = err }

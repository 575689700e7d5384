package format

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"

	"fmt"
	"github.com/diskimport/engine/errdefs"
)

// xz container layout, from "The .xz File Format" 1.1.0.
const (
	xzStreamHeaderLen = 12
	xzFilterLZMA2     = 0x21
)

// xzFirstDictSize reads the stream header and the first block header of an
// xz stream and returns the largest LZMA2 dictionary its filter chain asks
// for, so a tiny hostile stream announcing a huge dictionary is refused
// before any decoder allocates it. ok is false when the head holds no block
// (an empty stream, or a head too short to tell: the decoder will judge).
func xzFirstDictSize(head []byte) (dict int64, ok bool, err error) {
	if len(head) < xzStreamHeaderLen || !bytes.HasPrefix(head, magicXZ) {
		return 0, false, nil
	}
	if crc32.ChecksumIEEE(head[6:8]) != binary.LittleEndian.Uint32(head[8:12]) {
		return 0, false, xzInvalid("stream header CRC mismatch")
	}
	b := head[xzStreamHeaderLen:]
	if len(b) < 1 || b[0] == 0 {
		return 0, false, nil // index follows: no blocks
	}
	hlen := (int(b[0]) + 1) * 4
	if len(b) < hlen {
		return 0, false, nil
	}
	bh := b[:hlen]
	if crc32.ChecksumIEEE(bh[:hlen-4]) != binary.LittleEndian.Uint32(bh[hlen-4:]) {
		return 0, false, xzInvalid("block header CRC mismatch")
	}
	flags := bh[1]
	if flags&0x3c != 0 {
		return 0, false, xzInvalid("reserved block flags set")
	}
	p := bh[2 : hlen-4]
	var ok2 bool
	if flags&0x40 != 0 { // compressed size present
		if _, p, ok2 = xzVLI(p); !ok2 {
			return 0, false, xzInvalid("bad compressed size in block header")
		}
	}
	if flags&0x80 != 0 { // uncompressed size present
		if _, p, ok2 = xzVLI(p); !ok2 {
			return 0, false, xzInvalid("bad uncompressed size in block header")
		}
	}
	nfilters := int(flags&3) + 1
	for i := 0; i < nfilters; i++ {
		var id, psize uint64
		if id, p, ok2 = xzVLI(p); !ok2 {
			return 0, false, xzInvalid("bad filter id in block header")
		}
		if psize, p, ok2 = xzVLI(p); !ok2 || psize > uint64(len(p)) {
			return 0, false, xzInvalid("bad filter properties in block header")
		}
		props := p[:psize]
		p = p[psize:]
		if id != xzFilterLZMA2 {
			continue
		}
		if len(props) != 1 || props[0] > 40 {
			return 0, false, xzInvalid("bad LZMA2 properties")
		}
		dict = max(dict, lzma2DictSize(props[0]))
		ok = true
	}
	return dict, ok, nil
}

// lzma2DictSize decodes the LZMA2 dictionary-size byte.
func lzma2DictSize(b byte) int64 {
	if b == 40 {
		return 0xffffffff
	}
	return int64(2|b&1) << (b/2 + 11)
}

// xzVLI decodes one xz variable-length integer.
func xzVLI(p []byte) (uint64, []byte, bool) {
	var v uint64
	for i := 0; i < 9 && i < len(p); i++ {
		v |= uint64(p[i]&0x7f) << (7 * i)
		if p[i]&0x80 == 0 {
			return v, p[i+1:], true
		}
	}
	return 0, p, false
}

func xzInvalid(msg string) error {
	return fmt.Errorf("xz: %s: %w", msg, errdefs.ErrInvalidImage)
}

// checkXZDict refuses an xz stream whose first block wants a dictionary
// larger than limit.
func checkXZDict(head []byte, limit int64) error {
	dict, ok, err := xzFirstDictSize(head)
	if err != nil {
		return err
	}
	if ok && dict > limit {
		return fmt.Errorf("xz: stream asks for a %d-byte dictionary, limit is %d: %w", dict, limit, errdefs.ErrUnsafeImage)
	}
	return nil
}

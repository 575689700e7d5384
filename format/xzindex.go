package format

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/diskimport/engine/errdefs"
)

// xz's stream framing (the .xz file format, 1.0.4): a 12-byte stream
// header and footer; the footer is CRC32, backward size (the index's
// size / 4 - 1), 2 bytes of stream flags, "YZ". The index is a 0x00
// indicator, the number of records and, per block, its unpadded and
// uncompressed sizes, all as multibyte integers, then padding to 4 bytes
// and a CRC32.
const (
	xzStreamHeaderSize = 12
	xzStreamFooterSize = 12
	// xzMaxIndexSize bounds the index read: 16 MiB holds a million blocks
	// of 18-byte records, far more than any disk image's xz has.
	xzMaxIndexSize = 16 << 20
)

var xzFooterMagic = []byte("YZ")

// XZUncompressedSize reads the index at the end of a single-stream .xz of
// size bytes and returns the sum of its blocks' uncompressed sizes. A
// file whose framing does not add up to size (several streams, stream
// padding, a truncated file) is an ErrInvalidImage, not a guess.
func XZUncompressedSize(r io.ReaderAt, size int64) (int64, error) {
	if size < xzStreamHeaderSize+xzStreamFooterSize+8 {
		return 0, fmt.Errorf("xz index: %d bytes is too short for a stream: %w", size, errdefs.ErrInvalidImage)
	}
	footer := make([]byte, xzStreamFooterSize)
	if _, err := r.ReadAt(footer, size-xzStreamFooterSize); err != nil {
		return 0, fmt.Errorf("xz index: reading the stream footer: %w", err)
	}
	if !bytes.Equal(footer[10:], xzFooterMagic) || crc32.ChecksumIEEE(footer[4:10]) != binary.LittleEndian.Uint32(footer) {
		return 0, fmt.Errorf("xz index: no valid stream footer at the end: %w", errdefs.ErrInvalidImage)
	}
	indexSize := (int64(binary.LittleEndian.Uint32(footer[4:8])) + 1) * 4
	if indexSize > xzMaxIndexSize || indexSize > size-xzStreamHeaderSize-xzStreamFooterSize {
		return 0, fmt.Errorf("xz index: index of %d bytes in a %d-byte file: %w", indexSize, size, errdefs.ErrInvalidImage)
	}
	index := make([]byte, indexSize)
	if _, err := r.ReadAt(index, size-xzStreamFooterSize-indexSize); err != nil {
		return 0, fmt.Errorf("xz index: reading the index: %w", err)
	}
	blocks, uncompressed, err := parseXZIndex(index)
	if err != nil {
		return 0, err
	}
	if xzStreamHeaderSize+blocks+indexSize+xzStreamFooterSize != size {
		return 0, fmt.Errorf("xz index: the stream's blocks and index do not span the file (one stream, no padding, expected): %w", errdefs.ErrInvalidImage)
	}
	return uncompressed, nil
}

// parseXZIndex checks an index and returns the bytes its blocks occupy
// (unpadded sizes rounded up to 4) and their uncompressed sizes' sum.
func parseXZIndex(index []byte) (blocks, uncompressed int64, err error) {
	bad := func(what string) error {
		return fmt.Errorf("xz index: %s: %w", what, errdefs.ErrInvalidImage)
	}
	n := len(index)
	if index[0] != 0 || crc32.ChecksumIEEE(index[:n-4]) != binary.LittleEndian.Uint32(index[n-4:]) {
		return 0, 0, bad("indicator or CRC32 does not match")
	}
	rd := bytes.NewReader(index[1 : n-4])
	count, err := binary.ReadUvarint(rd)
	if err != nil {
		return 0, 0, bad("number of records")
	}
	for i := uint64(0); i < count; i++ {
		unpadded, err1 := binary.ReadUvarint(rd)
		size, err2 := binary.ReadUvarint(rd)
		if err := errors.Join(err1, err2); err != nil || unpadded == 0 || unpadded > 1<<62 || size > 1<<62 {
			return 0, 0, bad(fmt.Sprintf("record %d", i))
		}
		blocks += int64((unpadded + 3) &^ 3)
		uncompressed += int64(size)
		if blocks < 0 || uncompressed < 0 {
			return 0, 0, bad("sizes overflow")
		}
	}
	if rd.Len() > 3 {
		return 0, 0, bad("bytes after the records")
	}
	for rd.Len() > 0 {
		if b, _ := rd.ReadByte(); b != 0 {
			return 0, 0, bad("non-zero padding")
		}
	}
	return blocks, uncompressed, nil
}

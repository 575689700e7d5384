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

var (
	xzFooterMagic = []byte("YZ")
	xzHeaderMagic = []byte{0xfd, '7', 'z', 'X', 'Z', 0}
)

// xzMaxStreams bounds the streams walked (three reads each, range
// requests over HTTP): `cat a.xz b.xz` makes two, xz itself one.
const xzMaxStreams = 1024

// XZUncompressedSize reads the indexes of the .xz of size bytes and
// returns the sum of its blocks' uncompressed sizes. The file may be
// several streams one after the other (`cat a.xz b.xz`, what xz -dc
// decompresses as one) with stream padding (multiples of four zero bytes)
// after any of them, as xz --list walks it: from the end, each stream's
// footer gives its index, the index its blocks' sizes and so where its
// header must be. A file whose framing does not add up to size (a
// truncated file, a damaged footer, index or header) is an
// ErrInvalidImage, not a guess.
func XZUncompressedSize(r io.ReaderAt, size int64) (int64, error) {
	var total int64
	end := size
	for streams := 0; ; streams++ {
		if end == 0 && streams > 0 {
			return total, nil
		}
		if end = skipXZPadding(r, end); end == 0 {
			return 0, fmt.Errorf("xz index: no stream before the padding at the start of the file: %w", errdefs.ErrInvalidImage)
		}
		if streams == xzMaxStreams {
			return 0, fmt.Errorf("xz index: more than %d streams: %w", xzMaxStreams, errdefs.ErrInvalidImage)
		}
		start, n, err := xzStream(r, end)
		if err != nil {
			return 0, err
		}
		if total += n; total < 0 {
			return 0, fmt.Errorf("xz index: sizes overflow: %w", errdefs.ErrInvalidImage)
		}
		end = start
	}
}

// skipXZPadding returns where the stream padding before end begins: end
// moved back over zero words (a footer ends in "YZ", never in zeros).
func skipXZPadding(r io.ReaderAt, end int64) int64 {
	word := make([]byte, 4)
	for end >= 4 && end%4 == 0 {
		if _, err := r.ReadAt(word, end-4); err != nil || !bytes.Equal(word, []byte{0, 0, 0, 0}) {
			break
		}
		end -= 4
	}
	return end
}

// xzStream reads the stream that ends at end: it returns where the stream
// begins and its blocks' uncompressed size.
func xzStream(r io.ReaderAt, end int64) (start, uncompressed int64, err error) {
	if end < xzStreamHeaderSize+xzStreamFooterSize+8 {
		return 0, 0, fmt.Errorf("xz index: %d bytes is too short for a stream: %w", end, errdefs.ErrInvalidImage)
	}
	footer := make([]byte, xzStreamFooterSize)
	if _, err := r.ReadAt(footer, end-xzStreamFooterSize); err != nil {
		return 0, 0, fmt.Errorf("xz index: reading the stream footer: %w", err)
	}
	if !bytes.Equal(footer[10:], xzFooterMagic) || crc32.ChecksumIEEE(footer[4:10]) != binary.LittleEndian.Uint32(footer) {
		return 0, 0, fmt.Errorf("xz index: no valid stream footer at byte %d: %w", end-xzStreamFooterSize, errdefs.ErrInvalidImage)
	}
	indexSize := (int64(binary.LittleEndian.Uint32(footer[4:8])) + 1) * 4
	if indexSize > xzMaxIndexSize || indexSize > end-xzStreamHeaderSize-xzStreamFooterSize {
		return 0, 0, fmt.Errorf("xz index: index of %d bytes in a %d-byte stream: %w", indexSize, end, errdefs.ErrInvalidImage)
	}
	index := make([]byte, indexSize)
	if _, err := r.ReadAt(index, end-xzStreamFooterSize-indexSize); err != nil {
		return 0, 0, fmt.Errorf("xz index: reading the index: %w", err)
	}
	blocks, uncompressed, err := parseXZIndex(index)
	if err != nil {
		return 0, 0, err
	}
	start = end - (xzStreamHeaderSize + blocks + indexSize + xzStreamFooterSize)
	if start < 0 {
		return 0, 0, fmt.Errorf("xz index: the stream's blocks and index are larger than the file: %w", errdefs.ErrInvalidImage)
	}
	header := make([]byte, xzStreamHeaderSize)
	if _, err := r.ReadAt(header, start); err != nil {
		return 0, 0, fmt.Errorf("xz index: reading the stream header: %w", err)
	}
	// The header's magic and CRC32, and its flags equal to the footer's:
	// the index then accounts for every byte back to this stream's start.
	if !bytes.Equal(header[:6], xzHeaderMagic) || crc32.ChecksumIEEE(header[6:8]) != binary.LittleEndian.Uint32(header[8:]) ||
		!bytes.Equal(header[6:8], footer[8:10]) {
		return 0, 0, fmt.Errorf("xz index: no stream header at byte %d where the index says the stream begins: %w", start, errdefs.ErrInvalidImage)
	}
	return start, uncompressed, nil
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

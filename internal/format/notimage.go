package format

import (
	"bytes"
	"encoding/binary"

	"github.com/diskimport/engine/errdefs"
)

// notImageMagic is a file type that is neither a disk image nor a
// compression the engine removes: copying its bytes as a raw disk would
// leave a disk that cannot boot labelled complete.
type notImageMagic struct {
	name  string // "a bzip2 file"
	kind  error  // errdefs.ErrCompressedFile or ErrArchiveFile
	match func(head []byte) bool
}

func prefix(magic string) func([]byte) bool {
	return func(head []byte) bool { return bytes.HasPrefix(head, []byte(magic)) }
}

// notImageMagics are matched against the innermost stream's head when it
// has no image magic. Two-byte magics carry a check of what follows, so a
// raw disk's first instruction bytes are not mistaken for them.
var notImageMagics = []notImageMagic{
	{"a bzip2 file", errdefs.ErrCompressedFile, isBzip2},
	{"an lz4 file (legacy format)", errdefs.ErrCompressedFile, prefix("\x02\x21\x4c\x18")},
	{"an lzip file", errdefs.ErrCompressedFile, prefix("LZIP\x01")},
	{"an lzop file", errdefs.ErrCompressedFile, prefix("\x89LZO\x00\r\n\x1a\n")},
	{"an lzma file", errdefs.ErrCompressedFile, isLZMAAlone},
	{"a compress (.Z) file", errdefs.ErrCompressedFile, isUnixCompress},
	{"a zip archive", errdefs.ErrArchiveFile, isZip},
	{"a 7z archive", errdefs.ErrArchiveFile, prefix("7z\xbc\xaf\x27\x1c")},
	{"a rar archive", errdefs.ErrArchiveFile, prefix("Rar!\x1a\x07")},
	{"a cab archive", errdefs.ErrArchiveFile, prefix("MSCF\x00\x00\x00\x00")},
	{"a xar archive", errdefs.ErrArchiveFile, prefix("xar!")},
	{"an ar archive (a .deb?)", errdefs.ErrArchiveFile, prefix("!<arch>\n")},
	{"a cpio archive", errdefs.ErrArchiveFile, isCpio},
	{"an rpm package", errdefs.ErrArchiveFile, prefix("\xed\xab\xee\xdb")},
	{"a Windows imaging (WIM) archive", errdefs.ErrArchiveFile, prefix("MSWIM\x00\x00\x00")},
	{"an EnCase (EWF) evidence file", errdefs.ErrArchiveFile, isEWF},
}

// checkNotImage refuses a head whose magic names a compression or an
// archive the engine does not open.
func checkNotImage(head []byte) error {
	for _, m := range notImageMagics {
		if m.match(head) {
			return notImage(m.name, m.kind)
		}
	}
	return nil
}

// notImage is the refusal of a file of the kind named, with what to do.
func notImage(name string, kind error) error {
	hint := "decompress it first"
	if kind == errdefs.ErrArchiveFile {
		hint = "extract the disk image from it first"
	}
	return &errdefs.NotImageError{Message: name + ", not a disk image (" + hint + ")", Kind: kind}
}

// isBzip2: "BZh", the block size '1'..'9', then the magic of a compressed
// block (the digits of pi) or of the end of the stream (sqrt(pi)).
func isBzip2(head []byte) bool {
	if len(head) < 10 || !bytes.HasPrefix(head, []byte("BZh")) || head[3] < '1' || head[3] > '9' {
		return false
	}
	return bytes.HasPrefix(head[4:], []byte{0x31, 0x41, 0x59, 0x26, 0x53, 0x59}) ||
		bytes.HasPrefix(head[4:], []byte{0x17, 0x72, 0x45, 0x38, 0x50, 0x90})
}

// isLZMAAlone: the .lzma header of xz-utils and 7-Zip: properties 0x5d
// (lc=3 lp=0 pb=2, the only value either writes by default), a dictionary
// size of 2^n or 3·2^(n-1), and an unknown (all ones) or plausible size.
func isLZMAAlone(head []byte) bool {
	if len(head) < 13 || head[0] != 0x5d {
		return false
	}
	dict := binary.LittleEndian.Uint32(head[1:])
	okDict := false
	for n := 12; n <= 30; n++ {
		if dict == 1<<n || dict == 3<<(n-1) {
			okDict = true
		}
	}
	size := binary.LittleEndian.Uint64(head[5:])
	return okDict && (size == ^uint64(0) || size < 1<<48)
}

// isUnixCompress: 0x1f 0x9d, then flags with 9..16 maximum code bits and
// the two reserved bits clear.
func isUnixCompress(head []byte) bool {
	if len(head) < 3 || head[0] != 0x1f || head[1] != 0x9d {
		return false
	}
	bits := head[2] & 0x1f
	return head[2]&0x60 == 0 && bits >= 9 && bits <= 16
}

// isZip: a local file header, an empty archive's end record, or a spanned
// archive's marker.
func isZip(head []byte) bool {
	return bytes.HasPrefix(head, []byte("PK\x03\x04")) || bytes.HasPrefix(head, []byte("PK\x05\x06")) ||
		bytes.HasPrefix(head, []byte("PK\x07\x08PK"))
}

// isCpio: the ASCII headers (odc "070707", newc "070701", crc "070702")
// followed by octal or hexadecimal digits.
func isCpio(head []byte) bool {
	if len(head) < 12 || !bytes.HasPrefix(head, []byte("07070")) || head[5] < '1' || head[5] > '7' {
		return false
	}
	for _, b := range head[6:12] {
		if !(b >= '0' && b <= '9' || b >= 'a' && b <= 'f' || b >= 'A' && b <= 'F') {
			return false
		}
	}
	return true
}

// isEWF: EnCase's EWF (E01) and EWF2 (Ex01) signatures.
func isEWF(head []byte) bool {
	return bytes.HasPrefix(head, []byte("EVF\x09\x0d\x0a\xff\x00")) || bytes.HasPrefix(head, []byte("EVF2\x0d\x0a\x81\x00"))
}

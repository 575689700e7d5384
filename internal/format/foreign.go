package format

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/diskimport/engine/errdefs"
)

// Formats qemu-img opens but the engine does not accept. Sniff reports them
// so they are refused by name instead of being copied as raw container
// bytes, which would leave a disk that cannot boot labelled complete.
const (
	QCOW1     Format = "qcow"
	QED       Format = "qed"
	Parallels Format = "parallels"
	Bochs     Format = "bochs"
	Cloop     Format = "cloop"
	DMG       Format = "dmg"
	LUKS      Format = "luks"
	// VMDK extents of other kinds than the single-file sparse ones we check:
	// VMware's seSparse (ESXi snapshots) and the old VMware 3 "COWD" disks.
	// Both are only ever parts of a multi-file disk.
	VMDKSESparse Format = "vmdk (seSparse)"
	VMDKCOWD     Format = "vmdk (COWD)"
)

// Magic numbers of the refused formats, as qemu's drivers probe them.
var (
	magicQED         = []byte{'Q', 'E', 'D', 0}
	magicParallelsV1 = []byte("WithoutFreeSpace")
	magicParallelsV2 = []byte("WithouFreSpacExt")
	magicBochs       = []byte("Bochs Virtual HD Image")
	magicCloop       = []byte("#!/bin/sh\n#V2.0 Format\nmodprobe cloop file=$0 && mount -r -t iso9660 /dev/cloop $1\n")
	magicLUKS        = []byte{'L', 'U', 'K', 'S', 0xba, 0xbe}
	magicDMGTrailer  = []byte("koly")
	// seSparse: the little-endian 64-bit constant 0x00000000cafebabe.
	magicSESparse = []byte{0xbe, 0xba, 0xfe, 0xca, 0, 0, 0, 0}
	magicCOWD     = []byte("COWD")
)

// DMGTrailerLen is the size of the UDIF ("koly") trailer that ends a DMG:
// the format has nothing recognisable at its head.
const DMGTrailerLen = 512

// magicFormat is a format known by the bytes its images start with.
type magicFormat struct {
	magic []byte
	f     Format
}

// byMagic names the first format of table whose magic starts head, or "".
func byMagic(head []byte, table []magicFormat) Format {
	for _, m := range table {
		if bytes.HasPrefix(head, m.magic) {
			return m.f
		}
	}
	return ""
}

// foreignMagics are the refused formats known by their first bytes.
var foreignMagics = []magicFormat{
	{magicQED, QED}, {magicParallelsV1, Parallels}, {magicParallelsV2, Parallels}, {magicBochs, Bochs},
	{magicCloop, Cloop}, {magicLUKS, LUKS}, {magicSESparse, VMDKSESparse}, {magicCOWD, VMDKCOWD},
}

// sniffForeign names the refused format whose magic starts head, or "".
func sniffForeign(head []byte) Format {
	if f := byMagic(head, foreignMagics); f != "" {
		return f
	}
	if bytes.HasPrefix(head, magicQCOW2) && len(head) >= 8 && binary.BigEndian.Uint32(head[4:]) == 1 {
		// qcow version 1 shares the qcow2 magic; the version tells.
		return QCOW1
	}
	return ""
}

// errInvalidFormat is the refusal for a format qemu-img knows and the
// engine does not accept, worded as CDI words it.
func errInvalidFormat(f Format) error {
	return fmt.Errorf("Invalid format %s for image: %w", f, errdefs.ErrUnsupportedFormat)
}

// IsDMGTrailer reports whether tail, the last 512 bytes of a stream, is a
// DMG (UDIF) trailer: "koly", version 4, header size 512.
func IsDMGTrailer(tail []byte) bool {
	if len(tail) != DMGTrailerLen || !bytes.HasPrefix(tail, magicDMGTrailer) {
		return false
	}
	be := binary.BigEndian
	return be.Uint32(tail[4:]) == 4 && be.Uint32(tail[8:]) == DMGTrailerLen
}

// CheckTrailer refuses a raw stream whose last bytes say it is really an
// image of a format detected at its end (DMG). Call it with the held-back
// tail before the head of the stream is written.
func CheckTrailer(tail []byte) error {
	if len(tail) >= DMGTrailerLen && IsDMGTrailer(tail[len(tail)-DMGTrailerLen:]) {
		return errInvalidFormat(DMG)
	}
	return nil
}

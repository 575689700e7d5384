package testimg

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"testing"
)

// GPT layout facts (UEFI 2.x, chapter 5): a protective MBR (type 0xEE,
// signature 0x55AA at 510), the primary header at LBA 1 with 128 entries of
// 128 bytes from LBA 2, and the backup header in the last LBA with its
// entries just before it.
const (
	gptEntries    = 128
	gptEntrySize  = 128
	gptHeaderSize = 92
)

// BootableGPT makes the device or file at path look like a bootable disk of
// sectorSize-byte sectors over its whole size: a protective MBR with a boot
// signature, primary and backup GPT headers (CRCs filled in) and one EFI
// system partition entry. The bytes in between are left as they are.
func BootableGPT(t testing.TB, path string, sectorSize int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, err := f.Seek(0, 2)
	if err != nil {
		t.Fatal(err)
	}
	last := uint64(size/sectorSize - 1)
	entriesLen := int64(gptEntries * gptEntrySize)
	entrySectors := uint64((entriesLen + sectorSize - 1) / sectorSize)

	mbr := make([]byte, sectorSize)
	copy(mbr, "\xeb\x63\x90TEST-GPT-DISK")
	part := mbr[446:]
	part[4] = 0xEE // protective
	binary.LittleEndian.PutUint32(part[8:], 1)
	binary.LittleEndian.PutUint32(part[12:], uint32(min(last, 0xFFFFFFFF)))
	mbr[510], mbr[511] = 0x55, 0xAA

	entries := make([]byte, entrySectors*uint64(sectorSize))
	// EFI system partition type C12A7328-F81F-11D2-BA4B-00A0C93EC93B, mixed endian.
	copy(entries, []byte{0x28, 0x73, 0x2a, 0xc1, 0x1f, 0xf8, 0xd2, 0x11, 0xba, 0x4b, 0x00, 0xa0, 0xc9, 0x3e, 0xc9, 0x3b})
	copy(entries[16:], bytes.Repeat([]byte{0x42}, 16)) // its unique GUID
	firstUsable, lastUsable := 2+entrySectors, last-1-entrySectors
	binary.LittleEndian.PutUint64(entries[32:], firstUsable)
	binary.LittleEndian.PutUint64(entries[40:], lastUsable)
	entriesCRC := crc32.ChecksumIEEE(entries[:entriesLen])

	header := func(my, alternate, entriesAt uint64) []byte {
		h := make([]byte, sectorSize)
		copy(h, "EFI PART")
		binary.LittleEndian.PutUint32(h[8:], 0x00010000)
		binary.LittleEndian.PutUint32(h[12:], gptHeaderSize)
		binary.LittleEndian.PutUint64(h[24:], my)
		binary.LittleEndian.PutUint64(h[32:], alternate)
		binary.LittleEndian.PutUint64(h[40:], firstUsable)
		binary.LittleEndian.PutUint64(h[48:], lastUsable)
		copy(h[56:72], bytes.Repeat([]byte{0x17}, 16)) // disk GUID
		binary.LittleEndian.PutUint64(h[72:], entriesAt)
		binary.LittleEndian.PutUint32(h[80:], gptEntries)
		binary.LittleEndian.PutUint32(h[84:], gptEntrySize)
		binary.LittleEndian.PutUint32(h[88:], entriesCRC)
		binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h[:gptHeaderSize]))
		return h
	}
	at := func(lba uint64) int64 { return int64(lba) * sectorSize }
	for _, w := range []struct {
		b   []byte
		off int64
	}{
		{mbr, 0},
		{header(1, last, 2), at(1)},
		{entries, at(2)},
		{entries, at(last - entrySectors)},
		{header(last, 1, last-entrySectors), at(last)},
	} {
		if _, err := f.WriteAt(w.b, w.off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// HasBootSignature reports whether the first sector of path ends in 0x55AA.
func HasBootSignature(t testing.TB, path string) bool {
	t.Helper()
	b := readAt(t, path, 510, 2)
	return b[0] == 0x55 && b[1] == 0xAA
}

// HasBackupGPT reports whether the last sector of path, for 512- or
// 4096-byte sectors, starts with a GPT header's signature.
func HasBackupGPT(t testing.TB, path string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	size, err := f.Seek(0, 2)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, sector := range []int64{512, 4096} {
		if size >= sector && bytes.HasPrefix(readAt(t, path, size-sector, 8), []byte("EFI PART")) {
			return true
		}
	}
	return false
}

func readAt(t testing.TB, path string, off, n int64) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b
}

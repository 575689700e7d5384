//go:build linux

package volume

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"golang.org/x/sys/unix"
)

// gptSignature starts a GPT header; its MyLBA field (offset 24,
// little-endian) is the header's own sector.
const gptSignature = "EFI PART"

// wipeOldImage runs once per block target, before the first write that
// reaches the device: it zeroes the device's first MiB, and its last MiB
// when the last sector holds a GPT backup header (for 512- and 4096-byte
// sectors), and makes that durable. From then until the new image's own
// head is written last, the device holds no bootable-looking mix of the
// image it held and the one being written, whatever stops the import (as
// coreos-installer does). It is a no-op for files (a new temporary file)
// and after the first call; a failure is returned to every caller.
func (t *Target) wipeOldImage() error {
	if t.kind != Block {
		return nil
	}
	t.wipeMu.Lock()
	defer t.wipeMu.Unlock()
	if t.wiped {
		return t.wipeErr
	}
	t.wiped = true
	t.wipeErr = t.wipeOldImageLocked()
	return t.wipeErr
}

// wipedOnce reports whether wipeOldImage ran: something was to be
// written to the device, and its first MiB was zeroed first.
func (t *Target) wipedOnce() bool {
	t.wipeMu.Lock()
	defer t.wipeMu.Unlock()
	return t.wiped
}

func (t *Target) wipeOldImageLocked() error {
	n := min(int64(headSize), t.capacity) &^ int64(t.lbs-1)
	if n == 0 {
		return nil
	}
	zeros := alignedBuf(int(n))
	backup, err := t.backupGPTAtEnd()
	if err != nil {
		return err
	}
	// t.f is opened with O_DIRECT: the buffers and offsets are aligned.
	if _, err := t.f.WriteAt(zeros, 0); err != nil {
		return fmt.Errorf("zeroing the first %d bytes of %s before writing: %w", n, t.path, err)
	}
	if backup && t.capacity > n {
		if _, err := t.f.WriteAt(zeros, t.capacity-n); err != nil {
			return fmt.Errorf("zeroing the last %d bytes of %s (a backup GPT) before writing: %w", n, t.path, err)
		}
	}
	if err := unix.Fdatasync(int(t.f.Fd())); err != nil {
		return fmt.Errorf("fsync %s after zeroing its first MiB: %w", t.path, err)
	}
	t.log.Debug("zeroed the old image's head before writing", "path", t.path, "bytes", n, "backup_gpt_zeroed", backup)
	return nil
}

// backupGPTAtEnd reports whether the device's last sector is a GPT
// backup header (BackupGPTAtEnd).
func (t *Target) backupGPTAtEnd() (bool, error) {
	backup, err := BackupGPTAtEnd(t.f, t.capacity)
	if err != nil {
		return false, fmt.Errorf("%s: %w", t.path, err)
	}
	return backup, nil
}

// BackupGPTAtEnd reports whether the last sector of a device of capacity
// bytes, read through r, is a GPT backup header, for 512- or 4096-byte
// sectors: the signature and a MyLBA that names that last sector. An
// old image's backup header there is what a writer of a new image zeroes
// (with the rest of the device's last MiB) before its first write. r may
// be opened with O_DIRECT: the read is 4 KiB, aligned.
func BackupGPTAtEnd(r io.ReaderAt, capacity int64) (bool, error) {
	const span = 4096
	if capacity < span {
		return false, nil
	}
	buf := alignedBuf(span)
	if _, err := r.ReadAt(buf, capacity-span); err != nil {
		return false, fmt.Errorf("reading the last %d bytes: %w", span, err)
	}
	for _, sector := range []int64{512, 4096} {
		hdr := buf[span-sector:]
		if bytes.HasPrefix(hdr, []byte(gptSignature)) &&
			binary.LittleEndian.Uint64(hdr[24:32]) == uint64(capacity/sector-1) {
			return true, nil
		}
	}
	return false, nil
}

//go:build linux

// Package blockdev wraps the few Linux block-device calls the engine needs:
// type and size queries, an exclusive open that refuses mounted or claimed
// devices, and BLKZEROOUT. Every call goes through the file's raw connection
// (SyscallConn) rather than File.Fd, so the *os.File keeps its normal
// (non-blocking-mode) behaviour.
package blockdev

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
)

// IsBlockDevice reports whether path (after following symlinks) is a block
// device. A missing path is an error, not false, so callers do not mistake a
// typo for a file target.
func IsBlockDevice(path string) (bool, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	m := fi.Mode()
	return m&os.ModeDevice != 0 && m&os.ModeCharDevice == 0, nil
}

// SameDevice reports whether a and b are device nodes of one device (the
// same device number under two names), which os.SameFile does not see: it
// compares the nodes, not the device behind them.
func SameDevice(a, b os.FileInfo) bool {
	as, aok := a.Sys().(*syscall.Stat_t)
	bs, bok := b.Sys().(*syscall.Stat_t)
	return aok && bok && as.Rdev == bs.Rdev && as.Rdev != 0 &&
		a.Mode()&os.ModeDevice != 0 && b.Mode()&os.ModeDevice != 0
}

// control runs fn with the raw descriptor of f.
func control(f *os.File, fn func(fd uintptr) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var opErr error
	if err := rc.Control(func(fd uintptr) { opErr = fn(fd) }); err != nil {
		return err
	}
	return opErr
}

// Size returns the size of the block device in bytes (BLKGETSIZE64).
func Size(f *os.File) (int64, error) {
	var size uint64
	err := control(f, func(fd uintptr) error {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, fd, unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size)))
		if e != 0 {
			return e
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("get size of block device %s (BLKGETSIZE64): %w", f.Name(), err)
	}
	return int64(size), nil
}

// LogicalBlockSize returns the device's logical block size (BLKSSZGET), the
// unit O_DIRECT offsets and lengths must be multiples of.
func LogicalBlockSize(f *os.File) (int, error) {
	var n int
	err := control(f, func(fd uintptr) error {
		v, err := unix.IoctlGetInt(int(fd), unix.BLKSSZGET)
		n = v
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("get logical block size of %s (BLKSSZGET): %w", f.Name(), err)
	}
	return n, nil
}

// OpenExclusive opens the block device at path with flags|O_EXCL|O_CLOEXEC.
// On Linux, O_EXCL on a block device claims it: the open fails with EBUSY if
// the device is mounted or already claimed by another exclusive opener, and
// while we hold it nobody can mount it. Non-exclusive opens (qemu-img, our own
// second descriptor) still work. A path that is not a block device is refused,
// because O_EXCL without O_CREAT means nothing for other file types.
func OpenExclusive(path string, flags int) (*os.File, error) {
	isBlk, err := IsBlockDevice(path)
	if err != nil {
		return nil, err
	}
	if !isBlk {
		return nil, fmt.Errorf("%s is not a block device: %w", path, errdefs.ErrInvalidOptions)
	}
	fd, err := unix.Open(path, flags|unix.O_EXCL|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("block device %s is in use (mounted or opened exclusively by another process): %w", path, errdefs.ErrTargetBusy)
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// ZeroOut makes [off, off+length) read back as zeros (BLKZEROOUT). The kernel
// uses write-zeroes offload when the device has it and otherwise writes zero
// pages itself. off and length must be multiples of the logical block size.
// Drivers without the ioctl return ENOTTY/EOPNOTSUPP/EINVAL; callers then
// write zeros themselves (see IsUnsupported).
func ZeroOut(f *os.File, off, length int64) error {
	if length <= 0 {
		return nil
	}
	r := [2]uint64{uint64(off), uint64(length)}
	err := control(f, func(fd uintptr) error {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, fd, unix.BLKZEROOUT, uintptr(unsafe.Pointer(&r[0])))
		if e != 0 {
			return e
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("zero out %s [%d, +%d) (BLKZEROOUT): %w", f.Name(), off, length, err)
	}
	return nil
}

// IsUnsupported reports whether err says the device or driver cannot do the
// requested zeroing operation at all (as opposed to an I/O error), so the
// caller should fall back to another method.
func IsUnsupported(err error) bool {
	return errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP) ||
		errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS)
}

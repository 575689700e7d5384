//go:build linux

// Package volume opens the destination of an import (a block device or a
// file), hands out a fast sequential Writer for streamed raw data, and
// commits (fsync + rename) or aborts the result.
package volume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blockdev"
)

// Kind says what the target is.
type Kind int

const (
	// Block is a block device written in place.
	Block Kind = iota
	// File is a raw image file, written to a temporary file and renamed.
	File
)

func (k Kind) String() string {
	switch k {
	case Block:
		return "block"
	case File:
		return "file"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// DefaultFileName is the image name used when Options.Path is a directory
// (CDI's filesystem-volume layout).
const DefaultFileName = "disk.img"

// Options configure Open.
type Options struct {
	// Path is a block device, a file, or an existing directory (the image
	// then goes to DIR/disk.img).
	Path string
	// RequestedSize is the volume size the user asked for (0 = none). For
	// files it limits Capacity.
	RequestedSize int64
	// FilesystemOverhead is the CDI overhead fraction; see UsableSize. The
	// target does not apply it to Capacity (CDI does not either); it is kept
	// for callers sizing the final image.
	FilesystemOverhead float64
	// Scratch marks a short-lived file that a converter reads right after
	// it is written: it goes through the page cache (with bounded dirty
	// memory, the writeback pacer) so the reader finds it cached, and Commit
	// does not fsync it.
	Scratch bool
	// Mode is the permission bits of a new file target; 0 means 0660, as
	// CDI leaves disk.img.
	Mode os.FileMode
	// AllowSparseOvercommit lets a file target's Capacity pass the
	// filesystem's free space (RequestedSize, when set, still caps it), as
	// qemu-img convert does: a sparse image may need far less than its
	// virtual size, and a write past the real space fails with ENOSPC.
	AllowSparseOvercommit bool
	Logger                *slog.Logger
}

// Target is an opened import destination. It is not safe for concurrent use,
// except Writer.Written/DataBytes.
type Target struct {
	kind      Kind
	path      string // final path
	writePath string // device, or the temporary file
	f         *os.File
	capacity  int64
	lbs       int // logical block size (block only)
	scratch   bool
	log       *slog.Logger

	mu     sync.Mutex
	writer *Writer
	done   bool // committed or aborted

	// wipeOldImage's once-only state: writers of a device call it
	// before their first write, DeviceWriter's concurrently.
	wipeMu  sync.Mutex
	wiped   bool
	wipeErr error
	// headOnDevice: a writer's Finish wrote the image's first MiB, so an
	// Abort before Commit must zero it again (clearHeadLocked).
	headOnDevice atomic.Bool
	// freeSpace: capacity is the free space of a file's filesystem.
	freeSpace bool
	// abortedWritten: the aborted target had been written (a device's
	// head zeroed, a temporary file with bytes in it, removed).
	abortedWritten bool
}

// Open opens the target. Block devices are claimed exclusively (mounted or
// claimed devices fail with errdefs.ErrTargetBusy); files are created as a
// hidden temporary file next to the final path.
func Open(ctx context.Context, o Options) (*Target, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open target: %w: %w", errdefs.ErrCancelled, err)
	}
	if o.Path == "" {
		return nil, fmt.Errorf("target path is empty: %w", errdefs.ErrInvalidOptions)
	}
	if o.RequestedSize < 0 {
		return nil, fmt.Errorf("requested size %d is negative: %w", o.RequestedSize, errdefs.ErrInvalidOptions)
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	path := o.Path
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		path = filepath.Join(path, DefaultFileName)
		fi, err = os.Stat(path)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("stat target %s: %w", path, err)
	}
	if err == nil && fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0 {
		return openBlock(path, log)
	}
	if err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("target %s is neither a block device, a regular file nor a directory (mode %s): %w", path, fi.Mode(), errdefs.ErrInvalidOptions)
	}
	var replaced int64
	if err == nil {
		replaced = fi.Size()
	}
	t, err := openFile(path, replaced, o, log)
	if err != nil {
		return nil, err
	}
	t.scratch = o.Scratch
	return t, nil
}

func openBlock(path string, log *slog.Logger) (*Target, error) {
	// O_DIRECT on the claimed descriptor: the Writer streams through it;
	// unaligned tails go through a second, buffered descriptor.
	f, err := blockdev.OpenExclusive(path, unix.O_RDWR|unix.O_DIRECT)
	if err != nil {
		return nil, fmt.Errorf("open target block device: %w", err)
	}
	size, err := blockdev.Size(f)
	if err == nil {
		var lbs int
		lbs, err = blockdev.LogicalBlockSize(f)
		if err == nil {
			if lbs <= 0 || lbs&(lbs-1) != 0 || lbs > alignment {
				err = fmt.Errorf("unexpected logical block size %d of %s", lbs, path)
			} else {
				log.Debug("opened block target", "path", path, "size", size, "logical_block_size", lbs)
				return &Target{kind: Block, path: path, writePath: path, f: f, capacity: size, lbs: lbs, log: log}, nil
			}
		}
	}
	f.Close()
	return nil, err
}

func openFile(path string, replaced int64, o Options, log *slog.Logger) (*Target, error) {
	requested, mode := o.RequestedSize, o.Mode
	dir := filepath.Dir(path)
	di, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("target directory %s: %w", dir, err)
	}
	if !di.IsDir() {
		return nil, fmt.Errorf("target directory %s is not a directory: %w", dir, errdefs.ErrInvalidOptions)
	}
	// Before measuring free space: what an import killed before Commit
	// left behind is ours to reclaim.
	reclaimed, err := removeStaleTemps(dir, path, log)
	if err != nil {
		return nil, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil, fmt.Errorf("statfs %s: %w", dir, err)
	}
	// The file being replaced is deleted at Commit, so its space is free for
	// us (CDI measured free space with a stale disk.img in place and then
	// reported "too small" in a loop).
	capacity := int64(st.Bavail)*st.Bsize + replaced
	if o.AllowSparseOvercommit {
		capacity = math.MaxInt64
	}
	freeSpace := !o.AllowSparseOvercommit
	if requested > 0 && requested < capacity {
		capacity, freeSpace = requested, false
	}
	f, err := os.CreateTemp(dir, tempPattern(path))
	if err != nil {
		return nil, fmt.Errorf("create temporary file for %s: %w", path, err)
	}
	// Held until the Target closes: another import of the same target
	// starting meanwhile sees the file is live and leaves it alone.
	if err := lockTemp(f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("locking %s: %w", f.Name(), err)
	}
	// CDI leaves disk.img at 0660; CreateTemp gives 0600.
	if mode == 0 {
		mode = 0o660
	}
	if err := f.Chmod(mode.Perm()); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("chmod %s: %w", f.Name(), err)
	}
	log.Debug("opened file target", "path", path, "temp", f.Name(), "capacity", capacity, "replacing_bytes", replaced, "reclaimed_bytes", reclaimed)
	return &Target{kind: File, path: path, writePath: f.Name(), f: f, capacity: capacity, freeSpace: freeSpace, log: log}, nil
}

// Kind returns Block or File.
func (t *Target) Kind() Kind { return t.kind }

// Path returns the final path (the device, or the image file after Commit).
func (t *Target) Path() string { return t.path }

// WritePath returns where a converter such as qemu-img should write: the
// device, or the temporary file that Commit renames to Path.
func (t *Target) WritePath() string { return t.writePath }

// Capacity returns how many bytes the image may occupy: the device size, or
// for files the free space of the filesystem (plus the file being replaced),
// capped by Options.RequestedSize when set.
func (t *Target) Capacity() int64 { return t.capacity }

// TooSmall is the error for size bytes (named by what) that do not fit
// the target: a SizeError against Capacity that says whether Capacity is
// a file system's free space (which AllowSparseOvercommit may pass).
func (t *Target) TooSmall(size int64, what string) *errdefs.SizeError {
	return &errdefs.SizeError{ImageSize: size, TargetSize: t.capacity, What: what, FreeSpace: t.freeSpace}
}

// Commit makes the written image durable: fsync of the device, or fsync of
// the file, rename over Path, and fsync of the directory. A Writer handed out
// by NewWriter must have been finished.
func (t *Target) Commit(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return fmt.Errorf("commit %s: target already committed or aborted: %w", t.path, errdefs.ErrInvalidOptions)
	}
	if t.writer != nil && !t.writer.finished {
		return fmt.Errorf("commit %s: writer not finished: %w", t.path, errdefs.ErrInvalidOptions)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("commit %s: %w: %w", t.path, errdefs.ErrCancelled, err)
	}
	if t.kind == Block {
		// fsync on any descriptor of a block device flushes the device's whole
		// page cache (our buffered tail too) and its volatile write cache.
		if err := t.f.Sync(); err != nil {
			return fmt.Errorf("fsync block device %s: %w", t.path, err)
		}
		t.done = true
		return nil
	}
	// Re-open by name: a converter may have replaced the temporary file, and
	// then our descriptor would point at an orphaned inode.
	if !t.scratch {
		g, err := os.OpenFile(t.writePath, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("reopen %s for fsync: %w", t.writePath, err)
		}
		err = unix.Fdatasync(int(g.Fd()))
		g.Close()
		if err != nil {
			return fmt.Errorf("fsync %s: %w", t.writePath, err)
		}
	}
	if err := os.Rename(t.writePath, t.path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", t.writePath, t.path, err)
	}
	t.done = true
	if t.scratch {
		return nil
	}
	if err := syncDir(filepath.Dir(t.path)); err != nil {
		return err
	}
	t.log.Debug("committed file target", "path", t.path)
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s for fsync: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// Abort discards the import and releases the target: the temporary file is
// removed; a block device is closed with its first MiB zeroed (by the
// writer before its first write, and again here if Finish had written the
// image's), so it looks like no bootable image. Abort after Commit only
// closes.
func (t *Target) Abort() error { return t.Close() }

func (t *Target) abortLocked() error {
	if t.done {
		return nil
	}
	t.done = true
	if t.writer != nil {
		t.writer.release()
	}
	if t.kind == Block && t.headOnDevice.Load() && t.f != nil {
		if err := t.clearHeadLocked(); err != nil {
			return fmt.Errorf("wiping the image's first MiB off the failed target: %w", err)
		}
	}
	if t.kind == Block {
		t.abortedWritten = t.wipedOnce()
	}
	if t.kind == File {
		if fi, err := os.Stat(t.writePath); err == nil && fi.Size() > 0 {
			t.abortedWritten = true
		}
		// Removing an open file is fine on Linux; Close drops the descriptor.
		if err := os.Remove(t.writePath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove temporary file %s: %w", t.writePath, err)
		}
	}
	return nil
}

// AbortedWritten reports, once the target was aborted, whether anything
// had been written to it: a device's first MiB was zeroed before its first
// write (and again if the image's head had been written), a temporary file
// held bytes and was removed. False: the device is as it was, no file was
// made at the target's path.
func (t *Target) AbortedWritten() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.abortedWritten
}

// Close releases the target. Without a prior Commit it aborts first, so
// `defer t.Close()` never leaves a temporary file behind.
func (t *Target) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.abortLocked()
	if t.writer != nil {
		t.writer.release()
	}
	if t.f != nil {
		if cerr := t.f.Close(); cerr != nil && err == nil {
			err = cerr
		}
		t.f = nil
	}
	return err
}

//go:build linux

package volume

import (
	"fmt"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// writebackWindow is how much dirty data a scratch file may gather before
// its writeback is started; the window before it is waited for, so at most
// about two windows are dirty at once.
const writebackWindow = 32 << 20

// writeback paces page-cache writes of a scratch file: the data stays
// cached (clean) for the converter that reads it next, while dirty memory
// stays bounded instead of growing with the image — dirty page cache is
// what gets a small import pod OOM-killed.
type writeback struct {
	fd      int
	started int64 // writeback was started for [0, started)
	waited  int64 // and has completed for [0, waited)
}

// wrote notes that data up to end is in the page cache.
func (p *writeback) wrote(end int64) error {
	if end-p.started < writebackWindow {
		return nil
	}
	if p.started > p.waited {
		flags := unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WRITE | unix.SYNC_FILE_RANGE_WAIT_AFTER
		if err := unix.SyncFileRange(p.fd, p.waited, p.started-p.waited, flags); err != nil {
			return fmt.Errorf("sync_file_range: %w", err)
		}
		p.waited = p.started
	}
	if err := unix.SyncFileRange(p.fd, p.started, end-p.started, unix.SYNC_FILE_RANGE_WRITE); err != nil {
		return fmt.Errorf("sync_file_range: %w", err)
	}
	p.started = end
	return nil
}

// pacedWindow is how much a PacedFileWriter lets gather dirty before it
// starts the file's writeback; the batch before is waited for then, so
// about two windows are dirty or under writeback at once.
const pacedWindow = 32 << 20

// PacedFileWriter writes a file at any offset (the stream decoder's guest
// writes onto a file target) through the page cache, counts the bytes for
// progress and paces writeback: the writes land anywhere in the file, so
// each window of pacedWindow bytes starts writeback of the whole file
// after waiting for the window before, and drops the pages already
// written (nothing reads them again). Dirty page cache is what gets a
// small pod OOM-killed. WriteAt is called from one goroutine; Written
// from any.
type PacedFileWriter struct {
	f       *os.File
	written atomic.Int64
	pending int64 // bytes written since writeback was last started
}

// NewPacedFileWriter writes f, which the caller closes.
func NewPacedFileWriter(f *os.File) *PacedFileWriter { return &PacedFileWriter{f: f} }

// Written is the bytes written so far.
func (c *PacedFileWriter) Written() int64 { return c.written.Load() }

// WriteAt writes p at off, starting writeback once a window is written.
func (c *PacedFileWriter) WriteAt(p []byte, off int64) (int, error) {
	n, err := c.f.WriteAt(p, off)
	c.written.Add(int64(n))
	c.pending += int64(n)
	if err == nil && c.pending >= pacedWindow {
		c.pending = 0
		err = c.writeback()
	}
	return n, err
}

func (c *PacedFileWriter) writeback() error {
	fd := int(c.f.Fd())
	if err := unix.SyncFileRange(fd, 0, 0, unix.SYNC_FILE_RANGE_WAIT_BEFORE); err != nil {
		return fmt.Errorf("sync_file_range %s: %w", c.f.Name(), err)
	}
	_ = unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED) // advisory: clean pages only
	if err := unix.SyncFileRange(fd, 0, 0, unix.SYNC_FILE_RANGE_WRITE); err != nil {
		return fmt.Errorf("sync_file_range %s: %w", c.f.Name(), err)
	}
	return nil
}

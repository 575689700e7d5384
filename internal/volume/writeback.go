//go:build linux

package volume

import (
	"fmt"

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

package streamdecode

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
)

// spill is the file the retention moves data to when memory would pass
// its bound. It is created on first use in dir and unlinked at once, so
// nothing is left behind whatever way the decode ends (close frees the
// space); once every byte in it was claimed it is emptied and reused.
type spill struct {
	dir   string // "" = no spilling
	bound spillBound
	f     *os.File
	end   int64 // file size: where the next write goes
	live  int64 // bytes written and not yet freed
	peak  int64
	total int64
	dirty int64 // written since writeback was last started
}

// spillWritebackWindow is how much the spill file may gather dirty before
// its writeback is started (the batch before waited for): dirty page
// cache cannot be reclaimed, and is what gets a small pod OOM-killed;
// clean pages can, and are what a claim reads back.
const spillWritebackWindow = 32 << 20

func (s *spill) enabled() bool { return s.dir != "" }

// spillBound is the most the spill file may take: what the image can
// legitimately need held, at most its virtual size (every guest byte held
// once), and Options.MaxSpill when that is smaller.
type spillBound struct {
	max         int64 // 0: none
	virtualSize int64 // the image's, when it set max
	capped      bool  // max is Options.MaxSpill
}

// newSpillBound bounds the spill by need (0: unknown) and maxSpill (0: no
// cap).
func newSpillBound(need, virtualSize, maxSpill int64) spillBound {
	switch {
	case maxSpill > 0 && (need <= 0 || maxSpill < need):
		return spillBound{max: maxSpill, virtualSize: virtualSize, capped: true}
	case need > 0:
		return spillBound{max: need, virtualSize: virtualSize}
	}
	return spillBound{}
}

// SpillLimitError is the decoder needing to spill more than an image of
// its virtual size can legitimately need, or more than Options.MaxSpill:
// the layout holds bytes no table is known to refer to (a legitimate
// image's tables refer to at most its virtual size).
type SpillLimitError struct {
	Limit, Need int64
	VirtualSize int64
	// Capped: Limit is Options.MaxSpill, not the disk's size.
	Capped bool
}

func (e *SpillLimitError) Error() string {
	why := fmt.Sprintf("the image's virtual size, %d bytes", e.VirtualSize)
	if e.Capped {
		why = "the configured spill limit"
	}
	return fmt.Sprintf("streamdecode: the bytes that arrive before the tables that map them would need more than %d bytes of spill (%s), at least %d: %s",
		e.Limit, why, e.Need, errdefs.ErrNotStreamable)
}

func (e *SpillLimitError) Unwrap() error { return errdefs.ErrNotStreamable }

// write appends p and returns its offset in the file.
func (s *spill) write(p []byte) (int64, error) {
	if need := s.end + int64(len(p)); s.bound.max > 0 && need > s.bound.max {
		return 0, &SpillLimitError{Limit: s.bound.max, Need: need, VirtualSize: s.bound.virtualSize, Capped: s.bound.capped}
	}
	if s.f == nil {
		f, err := os.CreateTemp(s.dir, ".importer-spill-*")
		if err != nil {
			return 0, fmt.Errorf("streamdecode: creating the spill file for clusters that arrive before their tables: %w: %w", errdefs.ErrScratchSpaceRequired, err)
		}
		if err := os.Remove(f.Name()); err != nil {
			f.Close()
			return 0, fmt.Errorf("streamdecode: unlinking the spill file: %w", err)
		}
		s.f = f
	}
	at := s.end
	if _, err := s.f.WriteAt(p, at); err != nil {
		// A full scratch volume is a scratch volume too small.
		return 0, fmt.Errorf("streamdecode: writing %d bytes to the spill file in %s: %w: %w", len(p), s.dir, errdefs.ErrScratchSpaceRequired, err)
	}
	n := int64(len(p))
	s.end += n
	s.live += n
	s.total += n
	s.peak = max(s.peak, s.live)
	if s.dirty += n; s.dirty >= spillWritebackWindow {
		s.dirty = 0
		fd := int(s.f.Fd())
		// Advisory, as the page cache would write it back anyway.
		_ = unix.SyncFileRange(fd, 0, 0, unix.SYNC_FILE_RANGE_WAIT_BEFORE)
		_ = unix.SyncFileRange(fd, 0, 0, unix.SYNC_FILE_RANGE_WRITE)
	}
	return at, nil
}

func (s *spill) read(p []byte, off int64) error {
	if _, err := s.f.ReadAt(p, off); err != nil {
		return fmt.Errorf("streamdecode: reading %d bytes back from the spill file at %d: %w", len(p), off, err)
	}
	return nil
}

// free gives back [off, off+n) of the file: held bytes no longer needed.
// Once nothing in the file is needed it is cut to nothing and written
// from the start again. Punching each freed range out instead would make
// the filesystem write those dirty pages first (ext4 does), a synchronous
// write per claimed cluster.
func (s *spill) free(off, n int64) {
	if n <= 0 || s.f == nil {
		return
	}
	s.live -= n
	if s.live == 0 {
		// Advisory: a file that cannot be cut keeps its blocks until
		// close.
		if err := s.f.Truncate(0); err == nil {
			s.end, s.dirty = 0, 0
		}
	}
}

// close releases the file and with it its space.
func (s *spill) close() {
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}

func roundUp(n, unit uint64) uint64 { return (n + unit - 1) / unit * unit }

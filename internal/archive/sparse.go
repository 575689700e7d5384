package archive

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/iostage"
)

// checkRoom refuses a member larger than the free space of the destination
// filesystem before anything of it is written. A sparse member counts at
// its full (logical) size: a 1 TiB file in a 10 KiB archive is not a disk
// image this volume can hold.
func (x *extractor) checkRoom(name string, size int64) error {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(x.top.Fd()), &st); err != nil {
		return fmt.Errorf("statfs of the extraction directory: %w", err)
	}
	free := int64(st.Bavail) * st.Bsize
	if size > free {
		return fmt.Errorf("archive member %q is %d bytes, more than the %d bytes free on the destination: %w",
			name, size, free, errdefs.ErrTargetTooSmall)
	}
	return nil
}

// writeSparse copies a member's data, leaving holes where the member has
// them (see extractor.physical) and where a block of data is all zeros, and
// sets the final length.
func (x *extractor) writeSparse(f *os.File, r io.Reader) (int64, error) {
	var off int64
	for {
		if err := x.ctx.Err(); err != nil {
			return off, fmt.Errorf("%w: %w", errdefs.ErrCancelled, err)
		}
		before := x.physical.Count()
		n, rerr := fill(r, x.buf)
		if x.physical.Count() != before {
			// Data, or data and holes: only the blocks with a non-zero byte
			// are written. An all-hole chunk is skipped unread.
			if err := writeNonZeroBlocks(f, x.buf[:n], off); err != nil {
				return off, err
			}
		}
		off += int64(n)
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return off, readError(rerr)
		}
	}
	if err := f.Truncate(off); err != nil {
		return off, err
	}
	return off, nil
}

// writeNonZeroBlocks writes b at off but for its all-zero sparseBlock
// blocks.
func writeNonZeroBlocks(f *os.File, b []byte, off int64) error {
	for i := 0; i < len(b); i += sparseBlock {
		blk := b[i:min(i+sparseBlock, len(b))]
		if iostage.IsZero(blk) {
			continue
		}
		if _, err := f.WriteAt(blk, off+int64(i)); err != nil {
			return err
		}
	}
	return nil
}

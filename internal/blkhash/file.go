//go:build linux

package blkhash

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
)

// readSize is one read of SumFile: large enough that a read and the
// hashing of the previous one each keep a core busy.
const readSize = 8 << 20

// minHoleSkip is the smallest hole SumFile skips rather than reads: the
// 2 GiB bench disk's many small holes took 3.6 s skipped one by one, read
// with their data.
const minHoleSkip = 1 << 20

// SumFile digests the first size bytes of f (a raw file or a block
// device). The holes of a file (SEEK_DATA/SEEK_HOLE) are taken as zeros
// without reading them; the data is read while the previous read is
// hashed on workers goroutines. The pages read are dropped from the page
// cache as soon as they are copied: reading back a converted 1 GiB target
// inside a 256 MiB memory cgroup otherwise filled it with page cache (peak
// 256 MiB, the limit).
func SumFile(ctx context.Context, f *os.File, size int64, workers int) (Digest, error) {
	return hashFile(ctx, f, size, New(workers), nil)
}

// BlockSums is SumFile that also returns the hash of every block, in
// order (32 bytes per 64 KiB: what a delta clone compares). covered, when
// not nil, is advanced by the bytes hashed or skipped as holes, as they
// are (a pass's progress).
func BlockSums(ctx context.Context, f *os.File, size int64, workers int, covered *atomic.Int64) (Digest, []Sum, error) {
	h := New(workers)
	h.recording = true
	h.blocks = make([]Sum, 0, (size+BlockSize-1)/BlockSize)
	d, err := hashFile(ctx, f, size, h, covered)
	if err != nil {
		return Digest{}, nil, err
	}
	return d, h.blocks, nil
}

func hashFile(ctx context.Context, f *os.File, size int64, h *Hash, covered *atomic.Int64) (Digest, error) {
	advance := func(n int64) {
		if covered != nil {
			covered.Add(n)
		}
	}
	bufs := [2][]byte{make([]byte, readSize), make([]byte, readSize)}
	cur := 0
	wait := func() {}
	defer func() { wait() }()
	seekable := true
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return Digest{}, fmt.Errorf("digest of %s: %w: %w", f.Name(), errdefs.ErrCancelled, err)
		}
		end := size
		if seekable {
			data, hole, err := nextData(f, off, size)
			if err != nil {
				seekable = false // a device, or a file system without it: read it all
			} else {
				if data-off >= minHoleSkip || data == size {
					wait()
					wait = func() {}
					h.Zero(data - off)
					advance(data - off)
					off = data
					continue
				}
				// A small hole is read with the data around it: one
				// large read instead of many small ones, each waiting
				// for the last to be hashed.
				for end = hole; end < size && end-off < readSize; end = hole {
					if data, hole, err = nextData(f, end, size); err != nil || data-end >= minHoleSkip {
						break
					}
				}
			}
		}
		n := int(min(int64(readSize), end-off))
		buf := bufs[cur][:n]
		if _, err := f.ReadAt(buf, off); err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: %w", io.ErrUnexpectedEOF, errdefs.ErrInvalidImage)
			}
			return Digest{}, fmt.Errorf("digest of %s: read %d bytes at %d: %w", f.Name(), n, off, err)
		}
		_ = unix.Fadvise(int(f.Fd()), off, int64(n), unix.FADV_DONTNEED) // advisory: clean pages only
		wait()
		wait = h.Start(buf)
		cur ^= 1
		off += int64(n)
		advance(int64(n))
	}
	wait()
	wait = func() {}
	return h.Sum(), nil
}

// nextData returns the data range at or after off: [data, hole), data =
// size when only a hole is left.
func nextData(f *os.File, off, size int64) (data, hole int64, err error) {
	fd := int(f.Fd())
	data, err = unix.Seek(fd, off, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		return size, size, nil // a hole up to the end of the file
	}
	if err != nil {
		return 0, 0, err
	}
	if data >= size {
		return size, size, nil
	}
	hole, err = unix.Seek(fd, data, unix.SEEK_HOLE)
	if err != nil {
		return 0, 0, err
	}
	return data, min(hole, size), nil
}

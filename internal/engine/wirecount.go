package engine

import (
	"io"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
)

// rangeCount counts the range reads of a source: every byte received
// (wire) and the distinct bytes of the source they covered. qemu-img reads
// metadata more than once and the route choice reads a qcow2's tables
// before qemu-img reads them again, so the wire count passes the source's
// size where the distinct count never does; progress and the result report
// the distinct count, the bytes of the source read.
type rangeCount struct {
	wire atomic.Int64

	mu   sync.Mutex
	runs []span // sorted, disjoint, not adjacent
}

type span struct{ start, end int64 }

// add records that [off, off+n) was received.
func (c *rangeCount) add(off, n int64) {
	if n <= 0 {
		return
	}
	c.wire.Add(n)
	end := off + n
	c.mu.Lock()
	defer c.mu.Unlock()
	// The first run that ends at or after off, and the first that starts
	// after end: every run between touches [off, end) and merges into it.
	i := sort.Search(len(c.runs), func(i int) bool { return c.runs[i].end >= off })
	j := sort.Search(len(c.runs), func(i int) bool { return c.runs[i].start > end })
	if i < j {
		c.runs[i] = span{min(off, c.runs[i].start), max(end, c.runs[j-1].end)}
		c.runs = append(c.runs[:i+1], c.runs[j:]...)
		return
	}
	// Reads come mostly in order, so i is mostly the end: no allocation
	// and little to move.
	c.runs = append(c.runs, span{})
	copy(c.runs[i+1:], c.runs[i:])
	c.runs[i] = span{off, end}
}

// distinct returns the bytes covered by the reads and by [0, head): the
// head a stream read from the start before the range reads began.
func (c *rangeCount) distinct(head int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := max(head, 0)
	for _, r := range c.runs {
		if r.end <= head {
			continue
		}
		n += r.end - max(r.start, head)
	}
	return n
}

// countingReaderAt records every ReadAt's bytes in c.
type countingReaderAt struct {
	r io.ReaderAt
	c *rangeCount
}

func countReaderAt(r io.ReaderAt, c *rangeCount) io.ReaderAt { return &countingReaderAt{r: r, c: c} }

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	k, err := c.r.ReadAt(p, off)
	c.c.add(off, int64(k))
	return k, err
}

// allocatedSize is what reading the local image at path costs: its
// allocated bytes (qemu-img skips a file's holes), at most its size; a
// device's or a file's size when the allocation is not known.
func allocatedSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	size := st.Size()
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && st.Mode().IsRegular() {
		return min(size, sys.Blocks*512)
	}
	if size == 0 {
		if f, err := os.Open(path); err == nil {
			size, _ = f.Seek(0, io.SeekEnd)
			f.Close()
		}
	}
	return size
}

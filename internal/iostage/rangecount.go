package iostage

import (
	"io"
	"sort"
	"sync"
	"sync/atomic"
)

// RangeCounter counts the range reads of a source: every byte received
// (Wire) and the distinct bytes of the source they covered (Distinct).
// qemu-img reads metadata more than once and the route choice reads a
// qcow2's tables before qemu-img reads them again, so the wire count
// passes the source's size where the distinct count never does; progress
// and the result report the distinct count, the bytes of the source read.
// Its zero value is ready; it is safe for concurrent use.
type RangeCounter struct {
	wire atomic.Int64

	mu   sync.Mutex
	runs []span // sorted, disjoint, not adjacent
}

type span struct{ start, end int64 }

// Add records that [off, off+n) was received.
func (c *RangeCounter) Add(off, n int64) {
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

// Wire is every byte received, counted as often as it was.
func (c *RangeCounter) Wire() int64 { return c.wire.Load() }

// Distinct returns the bytes covered by the reads and by [0, head): the
// head a stream read from the start before the range reads began.
func (c *RangeCounter) Distinct(head int64) int64 {
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

// CountReaderAt returns r with every ReadAt's bytes recorded in c.
func CountReaderAt(r io.ReaderAt, c *RangeCounter) io.ReaderAt { return &countingReaderAt{r: r, c: c} }

type countingReaderAt struct {
	r io.ReaderAt
	c *RangeCounter
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	k, err := c.r.ReadAt(p, off)
	c.c.Add(off, int64(k))
	return k, err
}

package engine

import (
	"io"
	"sync/atomic"
)

// countingReaderAt adds the bytes every ReadAt returns to n.
type countingReaderAt struct {
	r io.ReaderAt
	n *atomic.Int64
}

func countReaderAt(r io.ReaderAt, n *atomic.Int64) io.ReaderAt { return &countingReaderAt{r: r, n: n} }

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	k, err := c.r.ReadAt(p, off)
	c.n.Add(int64(k))
	return k, err
}

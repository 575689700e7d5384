package iostage

import (
	"io"
	"sync/atomic"
)

// Counter counts the bytes read through it. Count is safe to call from
// another goroutine, so a progress reporter can poll it while the copy runs.
type Counter struct {
	r io.Reader
	n atomic.Int64
}

// NewCounter wraps r.
func NewCounter(r io.Reader) *Counter { return &Counter{r: r} }

func (c *Counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// Count returns the number of bytes read so far.
func (c *Counter) Count() int64 { return c.n.Load() }

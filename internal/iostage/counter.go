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

// Add counts n bytes read around the Counter: the same source's bytes
// taken another way (a zero run given as its length).
func (c *Counter) Add(n int64) { c.n.Add(n) }

// WriteCounter counts the bytes written through it into a counter the
// caller owns, so a progress reporter can poll it while the copy runs.
type WriteCounter struct {
	w io.Writer
	n *atomic.Int64
}

// NewWriteCounter wraps w, adding every byte written to n.
func NewWriteCounter(w io.Writer, n *atomic.Int64) *WriteCounter { return &WriteCounter{w: w, n: n} }

func (c *WriteCounter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

package iostage

import "io"

// TailHolder passes a stream on but never returns its last n bytes; after
// EOF, Tail returns them. The engine uses it to look at what may be a fixed
// VHD footer before deciding whether those bytes belong to the disk.
// Each Read costs at most two copies of n bytes, whatever the size of p.
type TailHolder struct {
	r    io.Reader
	n    int
	tail []byte // the last bytes read and not yet returned, len <= n
	err  error
}

// NewTailHolder wraps r, holding back its last n bytes.
func NewTailHolder(r io.Reader, n int) *TailHolder {
	return &TailHolder{r: r, n: n, tail: make([]byte, 0, n)}
}

func (t *TailHolder) Read(p []byte) (int, error) {
	if len(p) <= t.n {
		// Small reads would make no progress through the held window;
		// callers on the hot path pass large buffers, so keep this simple.
		buf := make([]byte, t.n+len(p))
		n, err := t.Read(buf)
		copy(p, buf[:n]) // n <= len(p): at most len(buf)-t.n bytes come out
		return n, err
	}
	for {
		if t.err != nil {
			return 0, t.err
		}
		k := copy(p, t.tail)
		m, err := t.r.Read(p[k:])
		t.err = err
		total := k + m
		if total <= t.n {
			t.tail = append(t.tail[:0], p[:total]...)
			continue
		}
		out := total - t.n
		t.tail = append(t.tail[:0], p[out:total]...)
		return out, nil
	}
}

// Tail returns the held-back bytes. It is meaningful once Read returned
// io.EOF.
func (t *TailHolder) Tail() []byte { return t.tail }

package iostage

import "io"

// TailHolder passes a stream on but never returns its last n bytes; after
// EOF, Tail returns them. The engine uses it to look at what may be a fixed
// VHD footer before deciding whether those bytes belong to the disk.
// Each Read costs at most two copies of n bytes, whatever the size of p.
// Runs of zeros from a RunReader pass as runs, their last n bytes held
// back as zeros.
type TailHolder struct {
	r    io.Reader
	n    int
	tail []byte // the last bytes read and not yet returned, len <= n
	// zeros are zeros of the stream after tail not passed on yet (a run
	// r gave, or what a Read left of one).
	zeros int64
	err   error
}

// NewTailHolder wraps r, holding back its last n bytes.
func NewTailHolder(r io.Reader, n int) *TailHolder {
	return &TailHolder{r: r, n: n, tail: make([]byte, 0, n)}
}

func (t *TailHolder) Read(p []byte) (int, error) {
	n, zeros, err := t.ReadRun(p)
	if zeros == 0 {
		return n, err
	}
	k := int(min(zeros, int64(len(p))))
	clear(p[:k])
	// What is left of the run and the zeros held after it are zeros
	// still to come.
	t.zeros = zeros - int64(k) + int64(len(t.tail))
	t.tail = t.tail[:0]
	return k, nil
}

// ReadRun is Read, passing on r's runs of zeros as runs (RunReader).
func (t *TailHolder) ReadRun(p []byte) (int, int64, error) {
	if len(p) <= t.n {
		// Small reads would make no progress through the held window;
		// callers on the hot path pass large buffers, so keep this simple.
		buf := make([]byte, t.n+len(p))
		n, zeros, err := t.ReadRun(buf)
		if n > len(p) {
			// The held bytes before a run (the rest read at most
			// len(buf)-t.n): those that do not fit are held again,
			// still before it.
			t.tail = append(t.tail[:0], buf[len(p):n]...)
			n = len(p)
		}
		copy(p, buf[:n])
		return n, zeros, err
	}
	for {
		if t.zeros == 0 && t.err != nil {
			return 0, 0, t.err
		}
		k := copy(p, t.tail)
		m := 0
		if t.zeros == 0 {
			var err error
			m, t.zeros, err = ReadRun(t.r, p[k:])
			t.err = err
		}
		switch {
		case t.zeros > int64(t.n) && k > 0:
			// The held bytes come before the run, more than n bytes
			// from the end: out they go.
			t.tail = t.tail[:0]
			return k, 0, nil
		case t.zeros > int64(t.n):
			// The run goes on as a run but for its last n bytes, held.
			z := t.zeros - int64(t.n)
			t.tail = t.tail[:t.n]
			clear(t.tail)
			t.zeros = 0
			return 0, z, nil
		case t.zeros > 0:
			// A run no longer than the held window goes in as bytes.
			m = int(min(t.zeros, int64(len(p)-k)))
			clear(p[k : k+m])
			t.zeros -= int64(m)
		}
		total := k + m
		if total <= t.n {
			t.tail = append(t.tail[:0], p[:total]...)
			continue
		}
		out := total - t.n
		t.tail = append(t.tail[:0], p[out:total]...)
		return out, 0, nil
	}
}

// KnowsRuns says whether the stream held gives runs (RunReader).
func (t *TailHolder) KnowsRuns() bool { return KnowsRuns(t.r) }

// Tail returns the held-back bytes. It is meaningful once Read returned
// io.EOF.
func (t *TailHolder) Tail() []byte { return t.tail }

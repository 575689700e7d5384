package qemu

import (
	"bytes"
	"strconv"
)

// progressWriter receives qemu-img -p output and calls fn for every
// "(NN.NN/100%)" token. qemu-img ends each update with '\r' when writing to
// a terminal-like stream and may use '\n' at the end, so both separate lines.
type progressWriter struct {
	fn      func(float64)
	partial []byte
	last    float64
}

func newProgressWriter(fn func(float64)) *progressWriter {
	return &progressWriter{fn: fn, last: -1}
}

// maxProgressLine bounds a line that never ends (garbage output).
const maxProgressLine = 4096

func (w *progressWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			w.partial = append(w.partial, p...)
			if len(w.partial) > maxProgressLine {
				w.partial = w.partial[:0]
			}
			break
		}
		w.partial = append(w.partial, p[:i]...)
		w.line(w.partial)
		w.partial = w.partial[:0]
		p = p[i+1:]
	}
	return n, nil
}

// Flush handles a final line without a terminator.
func (w *progressWriter) Flush() {
	if len(w.partial) > 0 {
		w.line(w.partial)
		w.partial = w.partial[:0]
	}
}

func (w *progressWriter) line(l []byte) {
	v, ok := parseProgress(l)
	if !ok || v == w.last {
		return
	}
	w.last = v
	if w.fn != nil {
		w.fn(v)
	}
}

// parseProgress extracts the percentage from a line like "    (45.34/100%)".
func parseProgress(l []byte) (float64, bool) {
	l = bytes.TrimSpace(l)
	if !bytes.HasPrefix(l, []byte("(")) || !bytes.HasSuffix(l, []byte("/100%)")) {
		return 0, false
	}
	num := l[1 : len(l)-len("/100%)")]
	v, err := strconv.ParseFloat(string(num), 64)
	if err != nil || v < 0 || v > 100 {
		return 0, false
	}
	return v, true
}

package format

import (
	"encoding/binary"
	"hash/crc32"
	"io"
)

// xzEndChecker wraps ulikunitz/xz's reader. That decoder returns a clean
// io.EOF for some truncated inputs (one cut inside the first block header,
// for example), so at its EOF we check ourselves that the compressed input
// really ended with an xz stream footer (stream padding, which is zeros,
// may follow it).
type xzEndChecker struct {
	dec  io.Reader
	tail *xzTailTracker
}

func (x *xzEndChecker) Read(p []byte) (int, error) {
	n, err := x.dec.Read(p)
	if err == io.EOF && !x.tail.endsWithFooter() {
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

// xzTailTracker passes the compressed input through and remembers the 12
// bytes that end at the last non-zero byte: a stream footer ends in "YZ".
type xzTailTracker struct {
	r      io.Reader
	last   []byte // the last up to 12 bytes of all input
	footer []byte // the 12 bytes ending at the last non-zero byte
}

func (t *xzTailTracker) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		t.observe(p[:n])
	}
	return n, err
}

func (t *xzTailTracker) observe(b []byte) {
	j := len(b) - 1
	for j >= 0 && b[j] == 0 {
		j--
	}
	if j >= 0 {
		t.footer = lastN(append(append([]byte(nil), t.last...), b[max(0, j-11):j+1]...), 12)
	}
	t.last = lastN(append(t.last, b[max(0, len(b)-12):]...), 12)
}

func lastN(b []byte, n int) []byte {
	if len(b) > n {
		return append([]byte(nil), b[len(b)-n:]...)
	}
	return b
}

func (t *xzTailTracker) endsWithFooter() bool {
	f := t.footer
	if len(f) != 12 || f[10] != 'Y' || f[11] != 'Z' {
		return false
	}
	return crc32.ChecksumIEEE(f[4:10]) == binary.LittleEndian.Uint32(f[0:4])
}

package format

import (
	"io"

	"github.com/diskimport/engine/internal/iostage"
)

// RawDiskReader reads the disk in a raw image stream: every byte but a
// fixed VHD's footer at its end. It holds back the stream's last
// FixedVHDFooterLen bytes until EOF and judges them there (CheckRawEnd): a
// footer describing exactly the bytes before it is left out, a DMG's
// trailer fails the read, anything else is returned as data.
type RawDiskReader struct {
	tail   *iostage.TailHolder
	passed int64 // bytes of the stream returned so far
	// After EOF: the held bytes still to return (the stream's end was
	// data), whether they were a footer, and what every read returns
	// once they are out (io.EOF or the refusal).
	rest   []byte
	judged bool
	footer bool
	err    error
}

// NewRawDiskReader reads the disk in the raw image stream r.
func NewRawDiskReader(r io.Reader) *RawDiskReader {
	return &RawDiskReader{tail: iostage.NewTailHolder(r, FixedVHDFooterLen)}
}

func (d *RawDiskReader) Read(p []byte) (int, error) {
	if !d.judged {
		n, err := d.tail.Read(p)
		if !d.ended(n, 0, err) {
			return n, err
		}
	}
	return d.readRest(p)
}

// ReadRun is Read, passing on the stream's runs of zeros as runs
// (iostage.RunReader).
func (d *RawDiskReader) ReadRun(p []byte) (int, int64, error) {
	if !d.judged {
		n, zeros, err := d.tail.ReadRun(p)
		if !d.ended(n, zeros, err) {
			return n, zeros, err
		}
	}
	n, err := d.readRest(p)
	return n, 0, err
}

// KnowsRuns says whether the stream gives runs (iostage.RunReader).
func (d *RawDiskReader) KnowsRuns() bool { return d.tail.KnowsRuns() }

// ended counts what the tail holder passed on and, once the stream
// ended, judges the bytes it held: it says whether the stream ended.
func (d *RawDiskReader) ended(n int, zeros int64, err error) bool {
	d.passed += int64(n) + zeros
	if err != io.EOF {
		return false
	}
	d.judge()
	return true
}

// readRest returns the held bytes the judgement left as data, then what
// every read returns after them.
func (d *RawDiskReader) readRest(p []byte) (int, error) {
	if len(d.rest) == 0 {
		return 0, d.err
	}
	n := copy(p, d.rest)
	d.rest = d.rest[n:]
	d.passed += int64(n)
	return n, nil
}

// judge decides what the held-back end of the stream is.
func (d *RawDiskReader) judge() {
	d.judged = true
	held := d.tail.Tail()
	footer, err := CheckRawEnd(held, d.passed)
	switch {
	case err != nil:
		d.err = err
	case footer:
		d.footer, d.err = true, io.EOF
	default:
		d.rest, d.err = held, io.EOF
	}
}

// FooterLeftOut says whether the stream ended in a fixed VHD's footer,
// which was not returned. Meaningful once Read returned io.EOF.
func (d *RawDiskReader) FooterLeftOut() bool { return d.footer }

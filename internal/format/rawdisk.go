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
		d.passed += int64(n)
		if err != io.EOF {
			return n, err
		}
		d.judge()
	}
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

package streamdecode

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"

	"github.com/diskimport/engine/errdefs"
)

// codec is how a compressed cluster or grain is stored.
type codec int

const (
	codecDeflate codec = iota // qcow2 "zlib": a raw deflate stream
	codecZstd                 // qcow2 compression type 1
	codecZlib                 // vmdk grains: zlib (RFC 1950) streams
)

// inflateJob inflates in into out and then releases op to the output
// stage. want is how many bytes the output must have, keep how many are
// written (less for a disk's last, partial cluster).
type inflateJob struct {
	in   []byte
	out  []byte
	want int
	keep int
	op   *op
	what string // for errors: "cluster 12", "grain 3"
}

// inflaters is a bounded pool of workers, each with its own decoder
// state; jobs run in any order, the output queue restores it.
type inflaters struct {
	codec codec
	jobs  chan inflateJob
	wg    sync.WaitGroup
}

func newInflaters(c codec, workers int) *inflaters {
	p := &inflaters{codec: c, jobs: make(chan inflateJob, workers)}
	for range workers {
		p.wg.Add(1)
		go p.work()
	}
	return p
}

func (p *inflaters) stop() {
	close(p.jobs)
	p.wg.Wait()
}

func (p *inflaters) work() {
	defer p.wg.Done()
	var d decoder
	defer d.close()
	for j := range p.jobs {
		n, err := d.inflate(p.codec, j.in, j.out)
		switch {
		case err != nil:
			j.op.err = fmt.Errorf("streamdecode: inflate %s: %w: %w", j.what, errdefs.ErrInvalidImage, err)
		case n < j.want:
			j.op.err = fmt.Errorf("streamdecode: %s inflates to %d bytes, want %d: %w", j.what, n, j.want, errdefs.ErrInvalidImage)
		default:
			j.op.p = j.out[:j.keep]
		}
		close(j.op.ready)
	}
}

// decoder holds one worker's reusable decompressors.
type decoder struct {
	src   bytes.Reader
	flate io.ReadCloser
	zlib  io.ReadCloser
	zstd  *zstd.Decoder
}

func (d *decoder) close() {
	if d.zstd != nil {
		d.zstd.Close()
	}
}

// inflate decompresses in into out. qcow2 (deflate, zstd) takes the first
// len(out) bytes and ignores what follows, as qemu does: the stored length
// is rounded up to sectors. A vmdk grain must be one complete zlib stream
// of at most len(out) bytes, as qemu's uncompress() wants it.
func (d *decoder) inflate(c codec, in, out []byte) (int, error) {
	d.src.Reset(in)
	var r io.Reader
	switch c {
	case codecDeflate:
		if d.flate == nil {
			d.flate = flate.NewReader(&d.src)
		} else if err := d.flate.(flate.Resetter).Reset(&d.src, nil); err != nil {
			return 0, err
		}
		r = d.flate
	case codecZstd:
		if d.zstd == nil {
			z, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(8<<20))
			if err != nil {
				return 0, err
			}
			d.zstd = z
		}
		if err := d.zstd.Reset(&d.src); err != nil {
			return 0, err
		}
		r = d.zstd
	case codecZlib:
		if d.zlib == nil {
			z, err := zlib.NewReader(&d.src)
			if err != nil {
				return 0, err
			}
			d.zlib = z
		} else if err := d.zlib.(zlib.Resetter).Reset(&d.src, nil); err != nil {
			return 0, err
		}
		return readComplete(d.zlib, out)
	}
	n, err := io.ReadFull(r, out)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return n, nil // short: the caller compares n with what it needs
	}
	return n, err
}

// readComplete reads a whole stream into out; a stream longer than out
// is an error.
func readComplete(r io.Reader, out []byte) (int, error) {
	n, err := io.ReadFull(r, out)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return n, nil
	case err != nil:
		return n, err
	}
	var one [1]byte
	k, err := r.Read(one[:])
	for k == 0 && err == nil {
		k, err = r.Read(one[:])
	}
	if k > 0 {
		return n, fmt.Errorf("stream inflates to more than %d bytes", len(out))
	}
	if errors.Is(err, io.EOF) {
		return n, nil
	}
	return n, err
}

package streamdecode

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/buffers"
	"github.com/diskimport/engine/internal/format"
)

// codec is how a compressed cluster or grain is stored.
type codec int

const (
	codecDeflate codec = iota // qcow2 "zlib": a raw deflate stream
	codecZstd                 // qcow2 compression type 1
	codecZlib                 // vmdk grains: zlib (RFC 1950) streams
)

// inflateJob inflates in into out and then releases op to the output
// stage, and in to inPool when it came from one. want is how many bytes
// the output must have, keep how many are written (less for a disk's
// last, partial cluster).
type inflateJob struct {
	in     []byte
	inPool *buffers.Pool
	out    []byte
	want   int
	keep   int
	op     *op
	what   string // for errors: "cluster 12", "grain 3"
}

// inflaters inflate the jobs: a bounded pool of workers, each with its
// own decoder state, whose jobs run in any order (the output queue
// restores it); or, for zlib grains and deflate clusters where the
// diskimport-inflate child is (format.StartBlockInflater), that child,
// started at the first job (an image without compressed clusters starts
// none), fed in order by one goroutine while another takes its results.
type inflaters struct {
	codec codec
	jobs  chan inflateJob
	wg    sync.WaitGroup
	// The child's: how it starts, and once started (by send, before its
	// first job reaches receive) the child or why it did not start.
	start    func() (*format.BlockInflater, error)
	child    *format.BlockInflater
	startErr error
}

// newInflaters makes the inflaters of codec c for outputs of at most
// maxOut bytes; child is Options.InflateChild.
func newInflaters(ctx context.Context, c codec, workers, maxOut int, child string) *inflaters {
	p := &inflaters{codec: c, jobs: make(chan inflateJob, workers)}
	o := format.Options{InflateChild: child}
	if c != codecZstd && o.InflateChildPath() != "" {
		bc := format.BlockDeflate
		if c == codecZlib {
			bc = format.BlockZlib
		}
		p.start = func() (*format.BlockInflater, error) { return format.StartBlockInflater(ctx, bc, maxOut, o) }
		sent := make(chan inflateJob, cap(p.jobs)+8)
		p.wg.Add(2)
		go p.send(sent)
		go p.receive(sent)
		return p
	}
	for range workers {
		p.wg.Add(1)
		go p.work()
	}
	return p
}

func (p *inflaters) stop() {
	close(p.jobs)
	p.wg.Wait()
	if p.child != nil {
		p.child.Close()
	}
}

// send starts the child at the first job, gives each job's input to it,
// in order, and queues the job for receive. Once the child refuses input
// (it failed or was stopped) or could not start, the jobs still go to
// receive, which fails them with the child's error.
func (p *inflaters) send(sent chan<- inflateJob) {
	defer p.wg.Done()
	defer close(sent)
	started, failed := false, false
	for j := range p.jobs {
		if !started {
			started = true
			p.child, p.startErr = p.start()
			if p.child == nil && p.startErr == nil {
				p.startErr = errors.New("the inflate child is gone from PATH")
			}
			failed = p.startErr != nil
		}
		sent <- j
		if !failed {
			failed = p.child.Send(j.in, len(j.out)) != nil
		}
		if j.inPool != nil {
			j.inPool.Put(j.in)
		}
	}
	if p.child != nil {
		p.child.CloseSend()
	}
}

// receive takes the child's results in the order the jobs were sent.
func (p *inflaters) receive(sent <-chan inflateJob) {
	defer p.wg.Done()
	for j := range sent {
		if p.startErr != nil {
			p.done(j, 0, p.startErr)
			continue
		}
		n, err := p.child.Receive(j.out)
		p.done(j, n, err)
	}
}

func (p *inflaters) work() {
	defer p.wg.Done()
	var d decoder
	defer d.close()
	for j := range p.jobs {
		n, err := d.inflate(p.codec, j.in, j.out)
		if j.inPool != nil {
			j.inPool.Put(j.in)
		}
		p.done(j, n, err)
	}
}

// done ends job j, inflated to n bytes or failed with err, and releases
// its op to the output stage.
func (p *inflaters) done(j inflateJob, n int, err error) {
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

// decoder holds one worker's reusable decompressors.
type decoder struct {
	src   bytes.Reader
	flate io.ReadCloser
	zstd  *zstd.Decoder
}

func (d *decoder) close() {
	if d.zstd != nil {
		d.zstd.Close()
	}
}

// inflate decompresses in into out. qcow2 deflate takes the first
// len(out) bytes and ignores what follows, as qemu does: the stored length
// is rounded up to sectors. qcow2 zstd fills out from whole frames
// (inflateZstd). A vmdk grain must be one complete zlib stream of at most
// len(out) bytes, as qemu's uncompress() wants it.
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
		return d.inflateZstd(in, out)
	case codecZlib:
		return d.inflateZlib(in, out)
	}
	n, err := io.ReadFull(r, out)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return n, nil // short: the caller compares n with what it needs
	}
	return n, err
}

// inflateZlib inflates a vmdk grain, one zlib stream (RFC 1950): the
// header (deflate, a window of at most 32 KiB, no preset dictionary: qemu's
// uncompress() takes none), the deflate stream, which must end within
// len(out) bytes, then the Adler-32 of what it inflated to. It is
// zlib.Reader's check with the checksum taken once over the whole grain
// (adler32Sum) instead of per Read by hash/adler32.
func (d *decoder) inflateZlib(in, out []byte) (int, error) {
	if len(in) < 2 {
		return 0, io.ErrUnexpectedEOF
	}
	if in[0]&0x0f != 8 || in[0]>>4 > 7 || binary.BigEndian.Uint16(in)%31 != 0 {
		return 0, zlib.ErrHeader
	}
	if in[1]&0x20 != 0 {
		return 0, zlib.ErrDictionary
	}
	d.src.Reset(in[2:])
	if d.flate == nil {
		d.flate = flate.NewReader(&d.src)
	} else if err := d.flate.(flate.Resetter).Reset(&d.src, nil); err != nil {
		return 0, err
	}
	n, err := readComplete(d.flate, out)
	if err != nil {
		return n, err
	}
	// The flate reader reads a bytes.Reader byte by byte (an
	// io.ByteReader), never past the stream's end: the checksum is next.
	var sum [4]byte
	if _, err := io.ReadFull(&d.src, sum[:]); err != nil {
		return n, io.ErrUnexpectedEOF
	}
	if binary.BigEndian.Uint32(sum[:]) != adler32Sum(out[:n]) {
		return n, zlib.ErrChecksum
	}
	return n, nil
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

// inflateZstd fills out with the zstd frames at the start of in, as
// qemu's qcow2_zstd_decompress does: frame after frame until out is full,
// the frame that fills it ending exactly there (one that would inflate
// past the cluster is a damaged cluster, -EIO in qemu); what follows it,
// the padding of the stored length's last sector, is not read.
func (d *decoder) inflateZstd(in, out []byte) (int, error) {
	if d.zstd == nil {
		z, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(8<<20))
		if err != nil {
			return 0, err
		}
		d.zstd = z
	}
	n := 0
	for n < len(out) {
		size, err := zstdFrameLen(in)
		if err != nil {
			return n, err
		}
		d.src.Reset(in[:size])
		if err := d.zstd.Reset(&d.src); err != nil {
			return n, err
		}
		k, err := io.ReadFull(d.zstd, out[n:])
		n += k
		in = in[size:]
		switch {
		case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
			continue // the frame ended first: the next one goes on
		case err != nil:
			return n, err
		}
		var one [1]byte
		k, err = d.zstd.Read(one[:])
		for k == 0 && err == nil {
			k, err = d.zstd.Read(one[:])
		}
		if k > 0 {
			return n, fmt.Errorf("a zstd frame inflates past the %d-byte cluster (qemu refuses it)", len(out))
		}
		if !errors.Is(err, io.EOF) {
			return n, err // the frame's end is damaged: its checksum
		}
	}
	return n, nil
}

// zstdFrameLen is the length of the zstd frame (or skippable frame) at the
// start of in, from its header and block headers (RFC 8878, 3.1).
func zstdFrameLen(in []byte) (int, error) {
	le := binary.LittleEndian
	if len(in) < 8 {
		return 0, fmt.Errorf("%d bytes left, too few for a zstd frame", len(in))
	}
	magic := le.Uint32(in)
	if magic&^0xf == 0x184d2a50 { // skippable frame
		n := 8 + int(le.Uint32(in[4:]))
		if n > len(in) || n < 8 {
			return 0, fmt.Errorf("skippable zstd frame of %d bytes in %d", n, len(in))
		}
		return n, nil
	}
	if magic != 0xfd2fb528 {
		return 0, fmt.Errorf("no zstd frame: magic %#x", magic)
	}
	fhd := in[4]
	single := fhd>>5&1 == 1
	p := 5
	if !single {
		p++ // window descriptor
	}
	p += [4]int{0, 1, 2, 4}[fhd&3]
	switch fhd >> 6 {
	case 0:
		if single {
			p++
		}
	case 1:
		p += 2
	case 2:
		p += 4
	case 3:
		p += 8
	}
	for {
		if p+3 > len(in) {
			return 0, fmt.Errorf("zstd frame cut inside its blocks")
		}
		bh := uint32(in[p]) | uint32(in[p+1])<<8 | uint32(in[p+2])<<16
		p += 3
		switch bh >> 1 & 3 {
		case 0, 2: // raw, compressed
			p += int(bh >> 3)
		case 1: // RLE
			p++
		default:
			return 0, fmt.Errorf("zstd block of reserved type")
		}
		if bh&1 == 1 {
			break
		}
	}
	if fhd>>2&1 == 1 {
		p += 4 // content checksum
	}
	if p > len(in) {
		return 0, fmt.Errorf("zstd frame of %d bytes cut at %d", p, len(in))
	}
	return p, nil
}

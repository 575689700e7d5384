package format

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/ulikunitz/xz"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/iostage"
)

// sourceReader remembers the first error of the compressed input that is
// not io.EOF, so a decoder failure caused by the source (a broken
// connection) is reported as the source's error, not as a corrupt image.
type sourceReader struct {
	r   io.Reader
	mu  sync.Mutex
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.mu.Lock()
		if s.err == nil {
			s.err = err
		}
		s.mu.Unlock()
	}
	return n, err
}

func (s *sourceReader) failure() error {
	if s == nil {
		return nil // no source: the caller writes the child's input
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// decoder is one peeled compression layer.
type decoder struct {
	codec Compression
	ctx   context.Context
	src   *sourceReader
	r     io.Reader
	close func() error
	err   error // sticky: a failed layer keeps failing
}

func (d *decoder) Read(p []byte) (int, error) {
	if d.err != nil {
		return 0, d.err
	}
	n, err := d.r.Read(p)
	return n, d.keepErr(err)
}

// ReadRun is Read, passing on a decoder child's runs of zeros
// (iostage.RunReader).
func (d *decoder) ReadRun(p []byte) (int, int64, error) {
	if d.err != nil {
		return 0, 0, d.err
	}
	n, zeros, err := iostage.ReadRun(d.r, p)
	return n, zeros, d.keepErr(err)
}

// KnowsRuns says whether the decoder gives runs.
func (d *decoder) KnowsRuns() bool { return iostage.KnowsRuns(d.r) }

// keepErr maps a failure of the layer, which then keeps failing.
func (d *decoder) keepErr(err error) error {
	if err != nil && err != io.EOF {
		d.err = d.mapErr(err)
		return d.err
	}
	return err
}

// mapErr turns a decoder error into the engine's error kinds.
func (d *decoder) mapErr(err error) error {
	if d.ctx.Err() != nil {
		return fmt.Errorf("%s: %w: %w", d.codec, errdefs.ErrCancelled, d.ctx.Err())
	}
	if serr := d.src.failure(); serr != nil {
		return serr
	}
	if errors.Is(err, errdefs.ErrInvalidImage) || errors.Is(err, errdefs.ErrUnsafeImage) {
		return err
	}
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%s: unexpected end of stream (truncated?): %w", codecName(d.codec), errdefs.ErrInvalidImage)
	case errors.Is(err, zstd.ErrWindowSizeExceeded), errors.Is(err, zstd.ErrDecoderSizeExceeded):
		return fmt.Errorf("%s: %v: %w", codecName(d.codec), err, errdefs.ErrUnsafeImage)
	}
	return fmt.Errorf("%s: %v: %w", codecName(d.codec), err, errdefs.ErrInvalidImage)
}

func (d *decoder) Close() error {
	if d.close == nil {
		return nil
	}
	c := d.close
	d.close = nil
	return c()
}

func codecName(c Compression) string {
	switch c {
	case Gzip:
		return "gzip"
	case XZ:
		return "xz"
	case Zstd:
		return "zstd"
	case LZ4:
		return "lz4"
	}
	return string(c)
}

// newDecoder starts the decoder for codec c reading compressed bytes from
// r; head is the first bytes of r, already peeked, for cheap header checks.
func newDecoder(ctx context.Context, c Compression, r io.Reader, head []byte, o Options) (*decoder, error) {
	src := &sourceReader{r: r}
	d := &decoder{codec: c, ctx: ctx, src: src}
	switch c {
	case Gzip:
		// The ring child, else igzip's pipe, else Go.
		started, err := d.startChild(o, childChoice{startInflateRing, o.InflateChildPath()},
			childChoice{startIgzip, o.gzipBinary()})
		if err != nil {
			return nil, err
		}
		if started {
			return d, nil
		}
		o.Logger.Debug("decoding gzip in Go (klauspost/compress/gzip)")
		ra := readAhead(src)
		// klauspost's gzip reads concatenated members (multistream) by
		// default; it measured fastest here (858 MB/s vs pgzip 808).
		zr, err := gzip.NewReader(src)
		if err != nil {
			ra.Close()
			return nil, d.mapErr(err)
		}
		d.r, d.close = zr, func() error { ra.Close(); return zr.Close() }
	case Zstd:
		// Concurrency 1 measured faster on two cores; the window cap bounds
		// memory. MaxMemory is raised because, for streams, it would also
		// refuse frames whose declared content size exceeds it (64 GiB by
		// default): disk images are bigger.
		// RLE blocks reach it as Raw blocks (rleAsRaw).
		zr, err := zstd.NewReader(newRLEAsRaw(src),
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxWindow(o.MaxZstdWindow),
			zstd.WithDecoderMaxMemory(1<<63),
			zstd.WithDecoderLowmem(false))
		if err != nil {
			return nil, d.mapErr(err)
		}
		d.r, d.close = zr, func() error { zr.Close(); return nil }
	case LZ4:
		d.r = lz4.NewReader(src)
	case XZ:
		if err := checkXZDict(head, o.MaxXZDictionary); err != nil {
			return nil, err
		}
		// The ring child, else xz's pipe, else Go.
		started, err := d.startChild(o, childChoice{startXZRing, o.InflateChildPath()},
			childChoice{startXZ, o.xzBinary()})
		if err != nil {
			return nil, err
		}
		if started {
			return d, nil
		}
		o.Logger.Debug("decoding xz in Go (ulikunitz/xz)")
		tail := &xzTailTracker{r: src}
		zr, err := xz.ReaderConfig{}.NewReader(tail)
		if err != nil {
			return nil, d.mapErr(err)
		}
		d.r = &xzEndChecker{dec: zr, tail: tail}
	default:
		return nil, fmt.Errorf("compression %q: %w", c, errdefs.ErrUnsupportedFormat)
	}
	return d, nil
}

// childChoice is a decoder child: how it starts, and its program ("" when
// it is not here).
type childChoice struct {
	start func(ctx context.Context, bin string, src *sourceReader, o Options) (*childProc, error)
	bin   string
}

// startChild starts the first of choices whose program is here as d's
// decoder; started is false when none is.
func (d *decoder) startChild(o Options, choices ...childChoice) (started bool, err error) {
	for _, c := range choices {
		if c.bin == "" {
			continue
		}
		o.Logger.Debug("decoding "+codecName(d.codec)+" with an external process", "program", c.bin)
		p, err := c.start(d.ctx, c.bin, d.src, o)
		if err != nil {
			return false, err
		}
		d.r, d.close = p, p.Close
		return true, nil
	}
	return false, nil
}

// Go's gzip decoder reads its input through a read-ahead goroutine
// (iostage.ReadAhead): readAheadBuffers of readAheadSize bytes. zstd and
// lz4 read theirs directly: the target writer's own reader goroutine
// already runs them apart from the writes, and a 1 GiB raw.zst (raw.lz4)
// imported onto a file took 0.71 (0.69) the time without the read-ahead,
// a raw.gz in Go 1.12 the time.
const (
	readAheadSize    = 256 << 10
	readAheadBuffers = 4
)

// readAhead moves src's reading onto a goroutine of its own; src then
// reads from it, still recording the input's first failure.
func readAhead(src *sourceReader) *iostage.ReadAhead {
	ra := iostage.NewReadAhead(src.r, readAheadSize, readAheadBuffers)
	src.r = ra
	return ra
}

// NewDecompressor returns the bytes of r with compression c removed, by the
// same decoders and limits Open uses to peel a layer (o's zero fields take
// the defaults). Its errors match errdefs.ErrInvalidImage, or
// ErrUnsafeImage for a stream that asks for too much memory, unless r
// failed first: then they are r's error. Close stops the decoder, not r.
func NewDecompressor(ctx context.Context, c Compression, r io.Reader, o Options) (io.ReadCloser, error) {
	o = o.withDefaults()
	var head []byte
	if c == XZ {
		// The dictionary check reads the stream and first block headers.
		br := bufio.NewReaderSize(r, xzStreamHeaderLen+1024+16)
		head, _ = br.Peek(br.Size())
		r = br
	}
	return newDecoder(ctx, c, r, head, o)
}

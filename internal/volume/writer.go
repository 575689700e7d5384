//go:build linux

package volume

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/iostage"
)

// WriterOption configures NewWriter.
type WriterOption func(*writerConfig)

type writerConfig struct {
	ctx          context.Context
	targetIsZero bool
	hash         *blkhash.Hash
}

// WithContext makes the Writer stop with errdefs.ErrCancelled when ctx ends.
// Without it the Writer uses context.Background().
func WithContext(ctx context.Context) WriterOption {
	return func(c *writerConfig) { c.ctx = ctx }
}

// WithTargetIsZero tells the Writer that a block device already reads zeros
// (freshly created or discarded), so zero runs are skipped instead of being
// zeroed. Files are always new and sparse, so it changes nothing for them.
func WithTargetIsZero(v bool) WriterOption {
	return func(c *writerConfig) { c.targetIsZero = v }
}

// WithContentHash makes the Writer feed every byte it accepts, in order,
// to h, each chunk hashed on h's workers while it is being written.
func WithContentHash(h *blkhash.Hash) WriterOption {
	return func(c *writerConfig) { c.hash = h }
}

// Writer writes a raw image sequentially from offset 0. It implements
// io.Writer and io.ReaderFrom; ReadFrom (used by io.Copy when the source has
// no WriteTo) is the fast path: an iostage.ReadAhead's goroutine fills
// aligned 4 MiB buffers while the calling goroutine zero-detects and
// writes them.
//
// Zero runs (64 KiB granules) become holes in files; on block devices they are
// zeroed with BLKZEROOUT / fallocate(ZERO_RANGE) / plain writes, or skipped
// with WithTargetIsZero. Data goes to block devices with O_DIRECT; an
// unaligned tail goes through a second, buffered descriptor.
//
// Before its first write to a block device it zeroes the old image's head
// (Target.wipeOldImage). The first MiB is kept in memory and only written
// by Finish. Any error is
// sticky: later calls return it. Only Written and DataBytes may be called
// from other goroutines.
type Writer struct {
	t            *Target
	ctx          context.Context
	log          *slog.Logger
	targetIsZero bool
	hash         *blkhash.Hash // nil: no content digest
	capacity     int64
	lbs          int64

	out      *os.File   // the O_DIRECT descriptor (for files without O_DIRECT support: the temp file)
	buffered *os.File   // descriptor without O_DIRECT for unaligned tails
	ownOut   bool       // out was opened by the Writer (file targets)
	pacer    *writeback // bounds dirty page cache of scratch files

	spares   [][]byte // chunk buffers for the next stages, kept between chunks
	stage    []byte   // chunk partly filled by Write or a short ReadFrom
	stageLen int
	head     []byte
	headLen  int
	zeroMap  []bool // scanZeros' result, reused chunk after chunk
	// zero makes a block device's zero runs read zeros; its buffer is
	// the zeros written where a run is too short for that.
	zero *Zeroer

	// Chunks Write filled (and staged chunks with the zero run after
	// them), being zero-scanned, hashed and written one after another
	// on goroutines of their own while Write fills the next. Everything
	// else that touches what processChunk does waits for them first
	// (settle).
	inflight inflightQueue

	off     int64 // bytes accepted; owned by the calling goroutine
	written atomic.Int64
	data    atomic.Int64

	zStart, zLen int64 // pending coalesced zero run

	oldImageWiped bool // Target.wipeOldImage done

	err      error
	finished bool
	released bool
}

// NewWriter returns the Writer for this target. Only one Writer per Target.
func (t *Target) NewWriter(opts ...WriterOption) (*Writer, error) {
	cfg := writerConfig{ctx: context.Background()}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.ctx == nil {
		cfg.ctx = context.Background()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done || t.f == nil {
		return nil, fmt.Errorf("new writer for %s: target already committed, aborted or closed: %w", t.path, errdefs.ErrInvalidOptions)
	}
	if t.writer != nil {
		return nil, fmt.Errorf("new writer for %s: target already has a writer: %w", t.path, errdefs.ErrInvalidOptions)
	}
	w := &Writer{
		t:            t,
		ctx:          cfg.ctx,
		log:          t.log,
		targetIsZero: cfg.targetIsZero,
		hash:         cfg.hash,
		capacity:     t.capacity,
		lbs:          int64(t.lbs),
		out:          t.f,
		head:         alignedBuf(headSize),
		zero:         NewZeroer(t.f, t.path, t.log),
	}
	switch t.kind {
	case Block:
		// Not O_EXCL: our own claim on the device would make that fail.
		f, err := os.OpenFile(t.path, os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open second (buffered) descriptor of %s: %w", t.path, err)
		}
		w.buffered = f
	case File:
		// O_DIRECT on the file too when its filesystem allows it: it skips
		// the copy into the page cache and the writeback burst at fsync.
		// 4 KiB alignment satisfies every common filesystem; tails and
		// filesystems without O_DIRECT (EINVAL) use the plain descriptor.
		w.buffered = t.f
		w.lbs = alignment
		if t.scratch {
			w.out, w.lbs = t.f, 1
			w.pacer = &writeback{fd: int(t.f.Fd())}
			break
		}
		if f := t.openDirect(); f != nil {
			w.out = f
			w.ownOut = true
		} else {
			w.out = t.f
			w.lbs = 1
		}
	}
	t.writer = w
	return w, nil
}

// Written returns the number of image bytes accepted so far (for progress).
func (w *Writer) Written() int64 { return w.written.Load() }

// DataBytes returns the bytes of image data actually written to the target so
// far, i.e. without zero runs that were skipped, left as holes or zeroed by
// the device. The held-back first MiB counts once Finish wrote it.
func (w *Writer) DataBytes() int64 { return w.data.Load() }

func (w *Writer) check() error {
	if w.err != nil {
		return w.err
	}
	if w.finished || w.released {
		return fmt.Errorf("write to %s: writer already finished or target closed: %w", w.t.path, errdefs.ErrInvalidOptions)
	}
	if err := w.ctx.Err(); err != nil {
		return w.fail(w.cancelled(err))
	}
	return nil
}

func (w *Writer) fail(err error) error {
	if w.err == nil {
		w.err = err
	}
	return w.err
}

func (w *Writer) cancelled(cause error) error {
	return fmt.Errorf("writing image to %s stopped: %w: %w", w.t.path, errdefs.ErrCancelled, cause)
}

func (w *Writer) tooSmall(size int64) error {
	return fmt.Errorf("target %s: %w", w.t.path, w.t.TooSmall(size, "image data"))
}

// takeBuf returns a spare chunk buffer, or a new one: a Writer holds at
// most chunksInFlight+2 (those in flight, the stage, the next chunk of a
// WriteFrom that straddles two).
func (w *Writer) takeBuf() []byte {
	if n := len(w.spares); n > 0 {
		b := w.spares[n-1]
		w.spares = w.spares[:n-1]
		return b
	}
	return alignedBuf(chunkSize)
}

// Write copies p into 4 MiB chunks and writes every full chunk on
// goroutines of their own, in order, up to chunksInFlight behind while it
// fills the next: a source of many small writes (a clone's runs, each
// handed over only once the last was taken) is read on while the device
// writes. An error of those writes is returned by a later call. Data
// that would pass Capacity is refused as a whole with
// errdefs.ErrTargetTooSmall.
func (w *Writer) Write(p []byte) (int, error) {
	if err := w.check(); err != nil {
		return 0, err
	}
	if w.off+int64(len(p)) > w.capacity {
		return 0, w.fail(w.tooSmall(w.off + int64(len(p))))
	}
	n := 0
	for n < len(p) {
		if w.stage == nil {
			w.stage = w.takeBuf()
			w.stageLen = 0
		}
		c := copy(w.stage[w.stageLen:], p[n:])
		n += c
		if err := w.staged(c); err != nil {
			return n, err
		}
	}
	return n, nil
}

// staged takes the n bytes just put after the staged ones, and hands the
// stage off once it is a full chunk.
func (w *Writer) staged(n int) error {
	w.stageLen += n
	w.off += int64(n)
	w.written.Add(int64(n))
	if w.stageLen == chunkSize {
		return w.handOffStage()
	}
	return nil
}

// MaxWriteFrom is the most WriteFrom takes in one call: one chunk.
const MaxWriteFrom = chunkSize

// WriteFrom is Write of the next n bytes of r (at most MaxWriteFrom),
// read straight into the chunk being filled instead of copied from the
// caller's buffer: a clone's data records read off the connection, one
// memmove of every byte less. It takes all n bytes or none: when r fails
// before the n-th, nothing was taken (Written does not move, the Writer
// stays usable) and r's error is returned as it is; a failure of the
// target is sticky, as Write's.
func (w *Writer) WriteFrom(r io.Reader, n int64) error {
	if err := w.check(); err != nil {
		return err
	}
	if n < 0 || n > MaxWriteFrom {
		return fmt.Errorf("write of %d bytes at once to %s: %w", n, w.t.path, errdefs.ErrInvalidOptions)
	}
	if w.off+n > w.capacity {
		return w.fail(w.tooSmall(w.off + n))
	}
	if w.stage == nil {
		w.stage, w.stageLen = w.takeBuf(), 0
	}
	// The bytes past the stage go at the start of the next chunk, which
	// is handed off only once every byte is read: until then a failure of
	// r leaves the stage as it was.
	first := min(int(n), chunkSize-w.stageLen)
	if _, err := io.ReadFull(r, w.stage[w.stageLen:w.stageLen+first]); err != nil {
		return err
	}
	var next []byte
	rest := int(n) - first
	if rest > 0 {
		next = w.takeBuf()
		if _, err := io.ReadFull(r, next[:rest]); err != nil {
			w.spares = append(w.spares, next)
			return err
		}
	}
	w.stageLen += first
	w.off += int64(first)
	w.written.Add(int64(first))
	if w.stageLen < chunkSize {
		return nil
	}
	if err := w.handOffStage(); err != nil {
		return err
	}
	if next != nil {
		w.stage, w.stageLen = next, rest
		w.off += int64(rest)
		w.written.Add(int64(rest))
	}
	return nil
}

// handOffStage starts writing the full staged chunk on its own goroutine,
// after the chunks handed off before it.
func (w *Writer) handOffStage() error {
	buf, n := w.stage, w.stageLen
	w.stage, w.stageLen = nil, 0
	off := w.off - int64(n)
	return w.startInflight(buf, func() error { return w.processChunk(off, buf[:n]) })
}

// startInflight hands apply (the work on buf, nil for none) to the
// in-flight queue, once it has room.
func (w *Writer) startInflight(buf []byte, apply func() error) error {
	for w.inflight.full() {
		if err := w.settleOldest(); err != nil {
			if buf != nil {
				w.spares = append(w.spares, buf) // not handed off
			}
			return err
		}
	}
	w.inflight.start(buf, apply)
	return nil
}

// settleOldest waits for the oldest hand-off; its buffer becomes a spare.
func (w *Writer) settleOldest() error {
	buf, err := w.inflight.waitOldest()
	if buf != nil {
		w.spares = append(w.spares, buf)
	}
	if err != nil {
		return w.fail(err)
	}
	return nil
}

// settle waits for every hand-off in flight and returns the first error;
// their buffers become spares.
func (w *Writer) settle() error {
	var first error
	for !w.inflight.empty() {
		if err := w.settleOldest(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// flushStage writes the staged chunk (full, or the final short one) after
// those in flight.
func (w *Writer) flushStage() error {
	if err := w.settle(); err != nil {
		return err
	}
	if w.stage == nil {
		return nil
	}
	buf, n := w.stage, w.stageLen
	w.stage, w.stageLen = nil, 0
	err := w.processChunk(w.off-int64(n), buf[:n])
	w.spares = append(w.spares, buf)
	if err != nil {
		return w.fail(err)
	}
	return nil
}

// fillChunk reads into buf[from:] until it is full or the source ends, but
// never more than one byte past the capacity: that byte proves the image does
// not fit without reading on. off is the image offset of buf[from].
func fillChunk(r io.Reader, buf []byte, from int, off, capacity int64) (n int, eof bool, err error) {
	want := len(buf) - from
	room := capacity - off
	limit := want
	if room < int64(want) {
		limit = int(room) + 1
	}
	n, eof, err = iostage.ReadChunk(r, buf[from:from+limit])
	if err != nil || eof {
		return n, eof, err
	}
	if int64(n) > room {
		return n, false, errTooBig
	}
	return n, false, nil
}

var errTooBig = errors.New("data passes capacity") // internal marker, never returned

// ReadFrom streams r into the target until EOF: an iostage.ReadAhead (the
// one read-ahead of the engine) fills poolSize aligned 4 MiB buffers on its
// goroutine, reading one byte past the capacity at most (that byte proves
// the image does not fit), while this goroutine zero-detects and writes
// them. It stops on the first error on either side or when the Writer's
// context ends; on cancellation it returns at once and the read-ahead's
// goroutine exits as soon as its pending Read returns.
func (w *Writer) ReadFrom(r io.Reader) (int64, error) {
	if err := w.check(); err != nil {
		return 0, err
	}
	if iostage.KnowsRuns(r) {
		return w.readRuns(r.(iostage.RunReader))
	}
	if err := w.settle(); err != nil {
		return 0, err
	}
	var total int64
	accept := func(n int) {
		total += int64(n)
		w.off += int64(n)
		w.written.Add(int64(n))
	}

	// Top up a chunk left partly filled by Write or an earlier ReadFrom, so
	// every chunk starts at a multiple of chunkSize.
	if w.stage != nil {
		n, eof, err := fillChunk(r, w.stage, w.stageLen, w.off, w.capacity)
		if err != nil {
			return total, w.fail(w.sourceErr(err, w.off+int64(n)))
		}
		accept(n)
		w.stageLen += n
		if eof {
			return total, nil
		}
		if err := w.flushStage(); err != nil {
			return total, err
		}
	}

	ra := iostage.NewAlignedReadAhead(io.LimitReader(r, w.capacity-w.off+1), chunkSize, poolSize, alignment)
	// Every chunk but the last is full (ReadChunk fills them whole): a
	// short one is held until the read-ahead says whether the source ended
	// or failed after it.
	var last []byte
	for {
		b, err := ra.NextContext(w.ctx)
		switch {
		case err == io.EOF: //nolint:errorlint // exact: a wrapped EOF is a failure of the source (iostage.ReadChunk)
			if last != nil {
				// The goroutine has ended: the short chunk keeps its bytes
				// and becomes the stage, topped up by a later Write.
				accept(len(last))
				w.stage, w.stageLen = last[:cap(last)], len(last)
			}
			return total, nil
		case err != nil:
			ra.Close()
			if cerr := w.ctx.Err(); cerr != nil {
				// Do not wait for a source that ignores cancellation; the
				// Writer is dead anyway.
				return total, w.fail(w.cancelled(cerr))
			}
			return total, w.fail(w.sourceErr(err, w.off+int64(len(last))))
		case w.off+int64(len(b)) > w.capacity:
			ra.Close()
			ra.Wait() // it read its last byte: the limit ended the source
			return total, w.fail(w.tooSmall(w.off + int64(len(b))))
		case len(b) < chunkSize:
			last = b
			continue
		}
		accept(len(b))
		err = w.processChunk(w.off-int64(len(b)), b)
		if err == nil && w.ctx.Err() != nil {
			err = w.cancelled(w.ctx.Err())
		}
		if err != nil {
			ra.Close()
			if w.ctx.Err() == nil {
				// The goroutine is at most one Read away from noticing
				// the Close; the source is the caller's again after it.
				ra.Wait()
			}
			return total, w.fail(err)
		}
	}
}

func (w *Writer) sourceErr(err error, size int64) error {
	if errors.Is(err, errTooBig) {
		return w.tooSmall(size)
	}
	return fmt.Errorf("read image data at offset %d: %w", w.off, err)
}

// Finish writes the staged tail, the pending zero run and the held-back first
// MiB, extends a file to the image length, and returns the image length. On
// a block device everything else is fdatasynced before the head is written,
// so the head is never durable before the data behind it; the head itself
// is made durable by Target.Commit, as a file is.
func (w *Writer) Finish() (int64, error) {
	if err := w.check(); err != nil {
		return 0, err
	}
	if err := w.flushStage(); err != nil {
		return 0, err
	}
	if err := w.flushZero(); err != nil {
		return 0, w.fail(err)
	}
	if w.t.kind == Block {
		if err := w.wipeOldImage(); err != nil {
			return 0, w.fail(err)
		}
		if err := unix.Fdatasync(int(w.out.Fd())); err != nil {
			return 0, w.fail(fmt.Errorf("fsync %s before writing the image's first MiB: %w", w.t.path, err))
		}
	}
	// Re-check right before the head goes out: a cancelled import must not
	// leave a bootable-looking first MiB.
	if err := w.ctx.Err(); err != nil {
		return 0, w.fail(w.cancelled(err))
	}
	if w.t.kind == Block {
		w.t.headOnDevice.Store(true) // from the first byte of it on
	}
	if err := w.emit(0, w.head[:w.headLen], w.scanZeros(w.head[:w.headLen])); err != nil {
		return 0, w.fail(err)
	}
	if err := w.flushZero(); err != nil {
		return 0, w.fail(err)
	}
	if w.t.kind == File {
		if err := w.t.f.Truncate(w.off); err != nil {
			return 0, w.fail(fmt.Errorf("extend %s to %d bytes: %w", w.t.writePath, w.off, err))
		}
	}
	w.finished = true
	w.release()
	w.log.Debug("image written", "path", w.t.path, "bytes", w.off, "data_bytes", w.data.Load())
	return w.off, nil
}

// release drops the Writer's own descriptor and buffers.
func (w *Writer) release() {
	if w.released {
		return
	}
	_ = w.settle() // its write is done before the descriptors close
	w.released = true
	if w.t.kind == Block && w.buffered != nil {
		w.buffered.Close()
	}
	if w.ownOut {
		w.out.Close()
	}
	w.buffered, w.out = nil, nil
	w.spares, w.stage, w.stageLen = nil, nil, 0
}

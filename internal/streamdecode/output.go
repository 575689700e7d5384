package streamdecode

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/iostage"
)

// op is one request to the sink, queued in stream order. Inflated
// clusters are queued before their worker is done: the output stage waits
// for ready, so the order of the queue is the order of the writes and the
// queue's capacity bounds the work in flight.
type op struct {
	off   int64
	p     []byte // data; nil with zeroLen > 0 for a zero range
	zeros int64

	chunk  *chunk      // stream buffer p points into, released after the write
	outBuf []byte      // inflate output buffer, returned to free after the write
	free   chan []byte // where outBuf goes back
	ready  chan struct{}
	err    error
	// scanned and zero cache holeOnPlainSink's scan of p.
	scanned, zero bool
}

// output is the stage that owns the sink: one goroutine, so a Sink needs
// no locking, and the decoding goroutine never waits on the target except
// when the queue is full.
type output struct {
	ctx    context.Context
	sink   Sink
	zeroer ZeroSink // nil: the target reads zeros where nothing is written
	holes  HoleSink // told of the zeros not written to a plain Sink, or nil
	queue  chan *op
	done   chan struct{}
	failed atomic.Bool
	err    error // valid after done
	data   int64 // valid after done
}

func newOutput(ctx context.Context, sink Sink, depth int) *output {
	o := &output{ctx: ctx, sink: sink, queue: make(chan *op, depth), done: make(chan struct{})}
	if z, ok := sink.(ZeroSink); ok {
		o.zeroer = z
	} else if h, ok := sink.(HoleSink); ok {
		o.holes = h
	}
	go o.run()
	return o
}

// send queues an op; it blocks while the queue is full.
func (o *output) send(x *op) { o.queue <- x }

// zero queues a guest range that must read as zeros (only a ZeroSink or
// a HoleSink hears of it).
func (o *output) zero(off, n int64) {
	if (o.zeroer == nil && o.holes == nil) || n <= 0 {
		return
	}
	o.send(&op{off: off, zeros: n})
}

// close waits for every queued op and returns the first error.
func (o *output) close() error {
	close(o.queue)
	<-o.done
	return o.err
}

func (o *output) run() {
	defer close(o.done)
	var next *op // taken from the queue while coalescing, not merged
	var merged []*op
	for {
		x := next
		next = nil
		if x == nil {
			var ok bool
			if x, ok = <-o.queue; !ok {
				return
			}
		}
		if x.ready != nil {
			<-x.ready
		}
		merged, next = o.coalesce(x, merged[:0])
		if o.err == nil {
			if err := o.apply(x); err != nil {
				o.err = err
				o.failed.Store(true)
			}
		}
		for _, y := range append(merged, x) {
			if y.chunk != nil {
				y.chunk.unref()
			}
			if y.outBuf != nil {
				y.free <- y.outBuf
			}
		}
	}
}

// maxCoalesced bounds one write made of queued writes.
const maxCoalesced = 8 << 20

// coalesce grows x, a write out of a stream chunk, by the writes queued
// right behind it that continue it both on the guest and in the chunk
// (a qcow2's clusters, a vhd's blocks, laid out in order), taking only
// what is queued already: one large write instead of one per cluster, and
// whole batches of blocks for the content digest's lanes with no copy. On
// a plain sink a write of zeros is not merged: it stays a hole. It
// returns the writes merged into x and the first one taken but not
// merged, which comes next.
func (o *output) coalesce(x *op, merged []*op) ([]*op, *op) {
	if x.ready != nil || x.p == nil || x.chunk == nil || x.err != nil || len(x.p) == 0 {
		return merged, nil
	}
	if o.holeOnPlainSink(x) {
		return merged, nil
	}
	for len(x.p) < maxCoalesced {
		var y *op
		select {
		case q, ok := <-o.queue:
			if !ok {
				return merged, nil
			}
			y = q
		default:
			return merged, nil
		}
		// An inflated write (ready) is its worker's until ready closes:
		// nothing else of it may be read here.
		if y.ready != nil {
			return merged, y
		}
		whole := x.p[:cap(x.p)]
		if y.p == nil || y.chunk != x.chunk || y.err != nil || len(y.p) == 0 ||
			y.off != x.off+int64(len(x.p)) || len(whole) < len(x.p)+len(y.p) || &whole[len(x.p)] != &y.p[0] ||
			len(x.p)+len(y.p) > maxCoalesced || o.holeOnPlainSink(y) {
			return merged, y
		}
		x.p = whole[:len(x.p)+len(y.p)]
		merged = append(merged, y)
	}
	return merged, nil
}

// holeOnPlainSink says whether x's data is all zeros going to a plain
// sink, which then skips it (the target reads zeros there already). A
// write is scanned once, though coalesce and apply both ask.
func (o *output) holeOnPlainSink(x *op) bool {
	if o.zeroer != nil {
		return false
	}
	if !x.scanned {
		x.scanned, x.zero = true, iostage.IsZero(x.p)
	}
	return x.zero
}

func (o *output) apply(x *op) error {
	if x.err != nil {
		return x.err
	}
	if err := o.ctx.Err(); err != nil {
		return fmt.Errorf("streamdecode: %w: %w", errdefs.ErrCancelled, err)
	}
	if x.p == nil {
		if o.zeroer == nil {
			o.holes.Hole(x.off, x.zeros)
			return nil
		}
		if err := o.zeroer.ZeroAt(x.off, x.zeros); err != nil {
			return fmt.Errorf("streamdecode: zero guest range %d+%d: %w", x.off, x.zeros, err)
		}
		return nil
	}
	if o.holeOnPlainSink(x) {
		if o.holes != nil {
			o.holes.Hole(x.off, int64(len(x.p)))
		}
		return nil // the target already reads zeros there
	}
	if _, err := o.sink.WriteAt(x.p, x.off); err != nil {
		return fmt.Errorf("streamdecode: write %d bytes at guest offset %d: %w", len(x.p), x.off, err)
	}
	o.data += int64(len(x.p))
	return nil
}

// chunk is one buffer of the input stream, shared by the ops that write
// straight out of it and reused once the last of them is done.
type chunk struct {
	buf  []byte
	refs atomic.Int32
	pool chan *chunk
}

func (c *chunk) ref() { c.refs.Add(1) }

func (c *chunk) unref() {
	if c.refs.Add(-1) == 0 {
		c.pool <- c
	}
}

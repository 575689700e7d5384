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
	for x := range o.queue {
		if x.ready != nil {
			<-x.ready
		}
		if o.err == nil {
			if err := o.apply(x); err != nil {
				o.err = err
				o.failed.Store(true)
			}
		}
		if x.chunk != nil {
			x.chunk.unref()
		}
		if x.outBuf != nil {
			x.free <- x.outBuf
		}
	}
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
	if o.zeroer == nil && iostage.IsZero(x.p) {
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

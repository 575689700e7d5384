package cloner

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
)

// streamBody is a request body produced as it is sent: net/http's
// HTTP/1.1 transport hands WriteTo its connection's chunked writer, so
// the records are encoded straight onto it, with no pipe and no second
// goroutine between them; anything that reads it instead (HTTP/2) gets
// the same bytes through a pipe. wire counts the bytes sent; sinkFailed
// is set when a write of the body failed (the connection, or the pipe the
// transport stopped reading), so a failure of the producer's own (its
// source, a cancel) can be told from it.
type streamBody struct {
	produce    func(w io.Writer) error
	wire       atomic.Int64
	sinkFailed atomic.Bool

	once sync.Once
	pr   *io.PipeReader
	done chan struct{}
	err  error // produce's, once done is closed (or WriteTo returned)
}

func newStreamBody(produce func(w io.Writer) error) *streamBody {
	return &streamBody{produce: produce, done: make(chan struct{})}
}

// bodyWriter is what produce writes to: the sink, counted.
type bodyWriter struct {
	w io.Writer
	b *streamBody
}

func (c bodyWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.b.wire.Add(int64(n))
	if err != nil {
		c.b.sinkFailed.Store(true)
	}
	return n, err
}

func (b *streamBody) WriteTo(w io.Writer) (int64, error) {
	started := false
	b.once.Do(func() { started = true })
	if !started {
		return 0, errors.New("the request body was already read")
	}
	before := b.wire.Load()
	b.err = b.produce(bodyWriter{w, b})
	close(b.done)
	return b.wire.Load() - before, b.err
}

func (b *streamBody) Read(p []byte) (int, error) {
	b.once.Do(func() {
		pr, pw := io.Pipe()
		b.pr = pr
		go func() {
			b.err = b.produce(bodyWriter{pw, b})
			pw.CloseWithError(b.err)
			close(b.done)
		}()
	})
	if b.pr == nil {
		return 0, errors.New("the request body is being written")
	}
	return b.pr.Read(p)
}

// finish ends the body's production once the request returned (a pipe
// nobody reads any more is closed) and returns its error, nil when it
// never started.
func (b *streamBody) finish() error {
	started := true
	b.once.Do(func() { started = false })
	if !started {
		return nil
	}
	if b.pr != nil {
		b.pr.CloseWithError(errors.New("request ended"))
	}
	<-b.done
	return b.err
}

// postStream sends one request whose body produce writes, and returns
// the answer and the bytes sent. When the producer failed on its own (its
// source could not be read, the clone was cancelled) rather than by
// writing to the connection, its error is the request's: the cause, not
// the transport's account of a body that ended early, and not a dropped
// connection to resume after.
func postStream(ctx context.Context, o Options, headers map[string]string, produce func(w io.Writer) error) ([]byte, int64, error) {
	body := newStreamBody(produce)
	answer, err := post(ctx, o, body, headers)
	perr := body.finish()
	if perr != nil && !body.sinkFailed.Load() && (err == nil || isTransportError(err)) {
		err = perr
	}
	return answer, body.wire.Load(), err
}

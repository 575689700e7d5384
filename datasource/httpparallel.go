package datasource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/buffers"
	"github.com/diskimport/engine/internal/ctxio"
	"github.com/diskimport/engine/internal/retry"
)

// Parallel ranges. A far or busy mirror caps each connection, not the
// link: measured with internal/testkit/farmirror (8 MB/s per connection, 30 ms
// before every response, a 96 MiB file), one connection took 12.6 s. So an
// HTTP object of known size whose server serves byte ranges is read over
// several connections: the Open's own response delivers the first chunk,
// and workers fetch the following chunks with range requests (RangeReader:
// the source's transport, credentials rules, If-Range pinning and retries),
// each into a buffer of its own, while Read hands the chunks out in order.
// At most Connections chunks are fetched or held at once, so the buffers
// never exceed Connections × ChunkSize bytes.
const (
	// DefaultConnections is the count of connections on a far link or
	// with CPU to spare (rangeConnections decides when Config.Connections
	// is 0): on the far mirror (8 MB/s per connection, 30 ms first byte,
	// 96 MiB) 8 connections took 1.87 s, 12 took 1.29 s and 16 took
	// 1.03 s (one connection: 12.67 s).
	DefaultConnections = 16
	// MaxConnections bounds Config.Connections (aria2c's own bound).
	MaxConnections = 16
	// DefaultChunkSize is Config.ChunkSize's default on a far link: 16
	// connections of 2 MiB hold 32 MiB of buffers and took 1.03 s on the
	// far mirror, of 4 MiB 64 MiB and 1.06 s (the next request's
	// first-byte delay passes before its turn, so smaller chunks cost no
	// waits).
	DefaultChunkSize = 2 << 20
	// NearChunkSize is its default on a near link (rangeConnections'
	// rule), where a first byte takes a few milliseconds at most: the
	// sixteen connections hold 16 MiB. From Go's file server on
	// 127.0.0.1 onto a direct-io loop device (the 2 GiB bench disk, 3
	// interleaved runs, 2 cores) the importer's peak RSS went from 117 to
	// 102 MiB on qcow2.gz, 95 to 80 on raw.gz and 96 to 82 on vhdx, its
	// wall time and CPU-seconds unchanged (qcow2.gz 1.24 and 1.21 s).
	NearChunkSize = 1 << 20
	// parallelAfter: the stream stays on its one connection until the
	// reader has taken this much of it. A format sniff reads 64 KiB per
	// layer, so an import that then reads over ranges (qemu-img) or only
	// inspects the head costs no more requests than before.
	parallelAfter = 256 << 10
)

// parallelBody is the Transfer body of an HTTP source read over several
// connections. Read is not safe for concurrent use; Close may be called
// from another goroutine.
type parallelBody struct {
	src    *httpSource
	first  *httpBody  // the Open's response: chunk 0, or everything after a fallback
	ranged *RangedURL // the object, pinned to the first response
	size   int64
	chunk  int64
	conns  int
	plan   chunkPlan

	parent context.Context
	work   context.Context // ends the workers: Close, a failure, a fallback
	stop   context.CancelCauseFunc

	// The reader's state.
	pos    int64
	head   *rangeChunk // the chunk being read (index ≥ 1)
	next   int64       // index of the chunk to read after head
	single bool        // reading the first response to its end
	err    error       // sticky
	streak *retry.Streak

	mu      sync.Mutex // guards started, closed and rr against Close
	started bool
	closed  bool
	rr      *RangeReader
	wg      sync.WaitGroup

	turnMu   sync.Mutex
	released int64              // chunks the reader read to their end (chunk 0 included)
	turn     chan struct{}      // closed and replaced at each release
	ring     []chan *rangeChunk // chunk k is handed over in ring[k % conns]
	claimMu  sync.Mutex         // guards claim, returned and active
	claim    int64              // the next chunk never taken
	returned []int64            // chunks handed back unread, taken before claim
	active   int                // workers running
	bufs     *buffers.Pool      // chunk buffers, reused once a chunk is read
	rangesOK chan struct{}      // closed at the first range response's bytes
	okOnce   sync.Once
	failed   chan struct{} // closed once failErr is set
	failOnce sync.Once
	failErr  error
}

// rangeChunk is one range being fetched into its buffer while the reader
// may already read its first bytes.
type rangeChunk struct {
	off  int64
	buf  []byte
	more chan struct{} // signalled when filled grows or the fetch ends

	mu     sync.Mutex
	filled int
	done   bool
	err    error

	read int // the reader's position in buf
}

func newParallelBody(ctx context.Context, first *httpBody, s *httpSource, conns int, chunk int64) *parallelBody {
	p := &parallelBody{
		src:      s,
		first:    first,
		ranged:   first.ranged,
		size:     first.size,
		chunk:    chunk,
		conns:    conns,
		parent:   ctx,
		turn:     make(chan struct{}),
		ring:     make([]chan *rangeChunk, conns),
		bufs:     buffers.NewPool(int(chunk), conns, 1),
		rangesOK: make(chan struct{}),
		failed:   make(chan struct{}),
	}
	p.plan = newChunkPlan(p.size, p.chunk, p.conns)
	for i := range p.ring {
		p.ring[i] = make(chan *rangeChunk, 1)
	}
	p.work, p.stop = context.WithCancelCause(ctx)
	p.claim = 1
	p.next = 1
	p.streak = s.budget.Streak(func(a retry.Attempt) {
		s.log.Warn("HTTP range transfer cannot go on, starting over", s.retryNotice(a, p.pos).Attr())
	})
	return p
}

// start opens the range reader and starts the workers, unless Close came
// first.
func (p *parallelBody) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started || p.closed {
		return
	}
	p.started = true
	rr, err := p.ranged.Open(p.work)
	if err != nil {
		p.fail(err)
		return
	}
	p.rr = rr
	p.src.log.Debug("reading over parallel range requests", "url", p.src.redacted, "connections", p.conns,
		"chunkSize", p.chunk, "size", p.size)
	p.wg.Add(p.conns)
	p.active = p.conns
	for range p.conns {
		go p.worker()
	}
}

// worker fetches chunks, one at a time, while there are chunks left. It
// sends a chunk's request at once and waits for its turn (waitTurn) only
// once the response's header has arrived, so the server's first-byte delay
// passes while the reader still drains the chunks before it. Measured on the
// far mirror (8 MB/s per connection, 30 ms first byte, 96 MiB, 16
// connections, medians of 3): 1.13 s with the request sent after the turn,
// 1.03 s with it sent before.
func (p *parallelBody) worker() {
	defer p.wg.Done()
	for {
		k, ok := p.take()
		if !ok {
			return
		}
		off, n := p.plan.span(k)
		c := &rangeChunk{off: off, more: make(chan struct{}, 1)}
		err := p.rr.fill(int(n), off, func() ([]byte, error) {
			if err := p.waitTurn(k); err != nil {
				return nil, err
			}
			c.buf = p.buffer(n)
			p.ring[k%int64(p.conns)] <- c // free: chunk k-conns was read
			return c.buf, nil
		}, c.progress(p), func(err error) bool { return refusesConnection(err) && p.handBack(k) })
		var hb *handedBack
		if errors.As(err, &hb) {
			p.src.log.Debug("the server refused one more connection: going on with fewer", "url", p.src.redacted,
				"chunk", k, "cause", hb.err.Error())
			return
		}
		if err != nil && p.work.Err() == nil {
			p.fail(err)
		}
		c.finish(err)
		if err != nil {
			return
		}
	}
}

// take gives the worker its next chunk: a chunk handed back first (the
// lowest, which the reader needs soonest), else the next one never taken.
// It says false, and the worker leaves, when none is left or the work
// ended; the choice and the count of workers change together, so a chunk
// handed back always has a worker left to take it.
func (p *parallelBody) take() (int64, bool) {
	p.claimMu.Lock()
	defer p.claimMu.Unlock()
	if p.work.Err() == nil {
		if len(p.returned) > 0 {
			k := p.returned[0]
			p.returned = p.returned[1:]
			return k, true
		}
		if p.claim < p.plan.count {
			p.claim++
			return p.claim - 1, true
		}
	}
	p.active--
	return 0, false
}

// handBack gives chunk k, not read yet, back to the other workers and
// makes the worker leave, when the server refused its connection (a cap
// on connections per client: nginx's limit_conn answers 503) and another
// worker is still running; the last one retries within the source's
// budget, as a single stream does. So the count of connections falls to
// what the server accepts instead of the import failing: a server that
// refused every connection beyond 3 failed a 16-connection read after its
// 10 retries in 75 ms.
func (p *parallelBody) handBack(k int64) bool {
	p.claimMu.Lock()
	defer p.claimMu.Unlock()
	if p.active <= 1 {
		return false
	}
	p.active--
	i, _ := slices.BinarySearch(p.returned, k)
	p.returned = slices.Insert(p.returned, i, k)
	return true
}

// refusesConnection tells a refusal of one more connection (503, 429)
// from the other failures a worker retries.
func refusesConnection(err error) bool {
	var se *errdefs.HTTPStatusError
	return errors.As(err, &se) && (se.StatusCode == http.StatusServiceUnavailable || se.StatusCode == http.StatusTooManyRequests)
}

// waitTurn returns once chunk k may take a buffer: when the reader has read
// chunk k-conns to its end, so that at most conns chunks are held at once.
// Turns go in chunk order, so the chunk the reader waits for always has one.
func (p *parallelBody) waitTurn(k int64) error {
	for {
		p.turnMu.Lock()
		ok, turn := k < p.released+int64(p.conns), p.turn
		p.turnMu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-turn:
		case <-p.work.Done():
			return context.Cause(p.work)
		}
	}
}

// releaseTurn counts a chunk read to its end and wakes the waiting workers.
func (p *parallelBody) releaseTurn() {
	p.turnMu.Lock()
	p.released++
	close(p.turn)
	p.turn = make(chan struct{})
	p.turnMu.Unlock()
}

// buffer gives a chunk n bytes: a freed buffer, or a new one.
func (p *parallelBody) buffer(n int64) []byte { return p.bufs.Get()[:n] }

func (c *rangeChunk) progress(p *parallelBody) func(int) {
	return func(filled int) {
		p.okOnce.Do(func() { close(p.rangesOK) })
		c.mu.Lock()
		c.filled = filled
		c.mu.Unlock()
		c.signal()
	}
}

func (c *rangeChunk) finish(err error) {
	c.mu.Lock()
	c.done, c.err = true, err
	c.mu.Unlock()
	c.signal()
}

func (c *rangeChunk) signal() {
	select {
	case c.more <- struct{}{}:
	default:
	}
}

// fail records the first failure and stops the workers.
func (p *parallelBody) fail(err error) {
	p.failOnce.Do(func() {
		p.failErr = err
		close(p.failed)
	})
	p.stop(err)
}

func (p *parallelBody) Read(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	if len(b) == 0 {
		return 0, nil
	}
	if p.single {
		return p.first.Read(b)
	}
	if p.pos < p.chunk {
		return p.readFirst(b)
	}
	if p.pos >= p.size {
		return 0, io.EOF
	}
	n, err := p.readChunk(b)
	if err != nil {
		p.err = err
	}
	return n, err
}

// readFirst reads chunk 0 from the first response, starts the workers once
// parallelAfter bytes (or the whole chunk) were read, and at the chunk's end hands over to them
// (or, when their range requests failed before any succeeded, goes on with
// the first response alone).
func (p *parallelBody) readFirst(b []byte) (int, error) {
	n, err := p.first.Read(b[:min(int64(len(b)), p.chunk-p.pos)])
	p.pos += int64(n)
	if err != nil {
		p.err = err
		return n, err
	}
	if p.pos >= min(parallelAfter, p.chunk) {
		p.start()
	}
	if p.pos < p.chunk {
		return n, nil
	}
	select {
	case <-p.rangesOK:
		p.first.Close()
		p.releaseTurn()
		return n, nil
	case <-p.failed:
	case <-p.work.Done():
	}
	if perr := p.parent.Err(); perr != nil {
		p.err = ctxio.Cancelled("reading "+p.src.redacted, perr)
		return n, p.err
	}
	if p.isClosed() {
		p.err = errdefs.ErrClosed
		return n, p.err
	}
	p.src.log.Warn("Range requests failed; reading the object over its one connection", "url", p.src.redacted, "cause", p.failErr.Error())
	p.single = true
	p.stopWorkers()
	return n, nil
}

// readChunk reads from the chunk at the reader's position.
func (p *parallelBody) readChunk(b []byte) (int, error) {
	if p.head == nil {
		select {
		case p.head = <-p.ring[p.next%int64(p.conns)]:
		case <-p.failed:
			return 0, p.failure()
		case <-p.work.Done():
			return 0, p.failure()
		}
	}
	c := p.head
	for {
		c.mu.Lock()
		filled, done, cerr := c.filled, c.done, c.err
		c.mu.Unlock()
		if filled > c.read {
			n := copy(b, c.buf[c.read:filled])
			c.read += n
			p.pos += int64(n)
			if c.read == len(c.buf) {
				p.release(c)
			}
			return n, nil
		}
		if done && cerr == nil && c.read == len(c.buf) {
			p.release(c)
			return 0, nil
		}
		if done {
			return 0, p.failure()
		}
		select {
		case <-c.more:
		case <-p.failed:
			return 0, p.failure()
		case <-p.work.Done():
			return 0, p.failure()
		}
	}
}

// release gives a chunk read to its end back: its buffer and its turn.
func (p *parallelBody) release(c *rangeChunk) {
	p.head = nil
	p.next++
	p.bufs.Put(c.buf)
	p.releaseTurn()
}

// failure is the error the reader sees once the workers stopped. An
// object that changed, or a server that stopped serving its ranges, is a
// *RestartError (the import starts over, as a stream that cannot resume
// does), after one retry's wait from the source's budget.
func (p *parallelBody) failure() error {
	if perr := p.parent.Err(); perr != nil {
		return ctxio.Cancelled("reading "+p.src.redacted, perr)
	}
	if p.isClosed() {
		return errdefs.ErrClosed
	}
	var err error
	select {
	case <-p.failed:
		err = p.failErr
	default:
		err = context.Cause(p.work)
	}
	var rf *rangeRefused
	if !errors.As(err, &rf) {
		return err
	}
	if werr := p.streak.Wait(p.parent, err, 0); werr != nil {
		if perr := p.parent.Err(); perr != nil {
			return ctxio.Cancelled("reading "+p.src.redacted, perr)
		}
		return werr
	}
	reason := "the server stopped serving byte ranges"
	if rf.changed {
		reason = "the object changed"
	}
	return &RestartError{URL: p.src.redacted, Offset: p.pos, Why: reason, Reason: fmt.Sprintf("%s (%v)", reason, err)}
}

func (p *parallelBody) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// stopWorkers ends the workers and waits for them.
func (p *parallelBody) stopWorkers() {
	p.stop(errdefs.ErrClosed)
	p.mu.Lock()
	rr := p.rr
	p.mu.Unlock()
	if rr != nil {
		rr.Close()
	}
	p.wg.Wait()
}

// Close aborts the transfer: the first response, the workers and their
// requests.
func (p *parallelBody) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.first.Close()
	p.stopWorkers()
	return err
}

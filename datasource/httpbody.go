package datasource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/ctxio"
	"github.com/diskimport/engine/internal/retry"
)

// httpBody is the Transfer body of an HTTP source. It turns the transport's
// read errors into engine errors, checks the byte count against
// Content-Length, runs the stall watchdog, and survives a broken transfer:
// it reconnects with "Range: bytes=N-" guarded by "If-Range" (the first
// response's strong ETag, else its Last-Modified) and carries on from the
// byte it stopped at, so the consumer never sees the break. When the
// server cannot continue that very object (it ignores the range, or the
// object changed), Read returns a *RestartError instead of mixing two.
//
// The watchdog is a time.AfterFunc timer armed only while a request or a
// Read waits for the network, so a slow consumer is never mistaken for a
// stalled server and no goroutine exists unless the timer fires.
type httpBody struct {
	src    *httpSource
	parent context.Context // the caller's context
	life   context.Context // cancelled by Close; parent of every request
	kill   context.CancelCauseFunc

	mu     sync.Mutex // guards cur and closed against a concurrent Close
	closed bool
	cur    *httpAttempt

	size   int64      // total size from the first response, or -1
	ranged *RangedURL // the object read at random, when the server serves ranges
	pin    objectPin  // the first response's validators
	got    int64
	streak *retry.Streak // this stream's failures in a row
	err    error         // sticky: once the stream failed or ended, it stays so
}

// httpAttempt is one request and its response body.
type httpAttempt struct {
	ctx      context.Context
	cancel   context.CancelCauseFunc
	timer    *time.Timer
	stallErr error
	resp     *http.Response
	// wait is the first GET's time from its request written to its
	// answer's first byte (0 for a resume, or not known).
	wait time.Duration
}

func (a *httpAttempt) close() {
	a.timer.Stop()
	if a.resp != nil {
		a.resp.Body.Close()
	}
	a.cancel(errdefs.ErrClosed)
}

// do sends one GET (with a Range from b.got when resuming) under a fresh
// stall watchdog. A transport failure comes back classified, with
// retryable saying whether another try may help.
func (b *httpBody) do() (a *httpAttempt, retryable bool, err error) {
	s := b.src
	ctx, cancel := context.WithCancelCause(b.life)
	a = &httpAttempt{ctx: ctx, cancel: cancel}
	a.stallErr = fmt.Errorf("GET %s: %w for %s: %w", s.redacted, errNoData, s.stall, errdefs.ErrSourceUnreachable)
	a.timer = time.AfterFunc(s.stall, func() { cancel(a.stallErr) })
	reqCtx := ctx
	var aw *answerWait
	if b.got == 0 {
		aw = newAnswerWait()
		reqCtx = httptrace.WithClientTrace(ctx, aw.trace())
	}
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, s.url.String(), nil)
	if err != nil {
		a.close()
		return nil, false, fmt.Errorf("building request for %s: %w: %w", s.redacted, errdefs.ErrInvalidOptions, err)
	}
	s.decorate(req, true)
	if b.got > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(b.got, 10)+"-")
		req.Header.Set("If-Range", b.pin.ifRange())
	}
	resp, err := s.client.Do(req)
	a.timer.Stop()
	if err != nil {
		a.close()
		err = s.requestError(b.parent, ctx, err)
		firstContact := s.noConnectRetry && !s.answered.Load()
		return nil, !firstContact && !errors.Is(err, errdefs.ErrCancelled) && !permanentTransportError(err), err
	}
	s.answered.Store(true)
	a.resp = resp
	if aw != nil {
		a.wait = aw.get()
	}
	return a, false, nil
}

// connect opens the first response (offset 0) or resumes at b.got,
// retrying what may pass. It installs the new attempt as b.cur.
func (b *httpBody) connect() error {
	s := b.src
	for {
		a, retryable, err := b.do()
		var hint time.Duration
		if err == nil {
			resp := a.resp
			switch {
			case resp.StatusCode >= 200 && resp.StatusCode <= 299:
				if b.got > 0 {
					if rerr := b.checkResume(resp); rerr != nil {
						a.close()
						return rerr
					}
				}
				return b.install(a)
			default:
				a.close()
				err = &errdefs.HTTPStatusError{URL: s.redacted, StatusCode: resp.StatusCode, Status: resp.Status}
				retryable = retryableStatus(resp.StatusCode)
				hint = retryAfter(resp)
			}
		}
		if !retryable {
			return err
		}
		if werr := b.wait(err, hint); werr != nil {
			return werr
		}
	}
}

// checkResume accepts a response to a resume request only when it is the
// rest of the same object, starting exactly at b.got: a 206 whose
// validators match the first response's (a server may ignore If-Range),
// with no encoding and the right Content-Range.
func (b *httpBody) checkResume(resp *http.Response) error {
	restart := func(why string) error {
		return &RestartError{URL: b.src.redacted, Offset: b.got, Reason: why}
	}
	verdict, why := b.pin.check(resp.Header)
	if resp.StatusCode != http.StatusPartialContent {
		if verdict == otherObject {
			return restart("the object changed (" + why + ")")
		}
		return restart(fmt.Sprintf("the server answered the range request with %q instead of 206 Partial Content", resp.Status))
	}
	switch verdict {
	case otherObject:
		return restart("the object changed (" + why + ")")
	case unverifiable:
		return restart("the resumed bytes cannot be shown to be the same object: " + why)
	}
	if ce := unaskedEncoding(resp.Header); ce != "" {
		return restart(fmt.Sprintf("the server answered the range request with Content-Encoding %q, which was not asked for", ce))
	}
	start, total, ok := parseContentRange(resp.Header.Get("Content-Range"))
	switch {
	case !ok:
		return restart(fmt.Sprintf("the 206 response has an unusable Content-Range %q", resp.Header.Get("Content-Range")))
	case start != b.got:
		return restart(fmt.Sprintf("the server resumed at byte %d, not %d", start, b.got))
	case b.size >= 0 && total >= 0 && total != b.size:
		return restart(fmt.Sprintf("the object is now %d bytes, was %d", total, b.size))
	}
	return nil
}

// parseContentRange reads "bytes START-END/TOTAL" (TOTAL may be "*": -1).
func parseContentRange(v string) (start, total int64, ok bool) {
	rest, found := strings.CutPrefix(v, "bytes ")
	if !found {
		return 0, 0, false
	}
	rng, tot, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, false
	}
	first, _, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, false
	}
	start, err := strconv.ParseInt(first, 10, 64)
	if err != nil || start < 0 {
		return 0, 0, false
	}
	total = -1
	if tot != "*" {
		if total, err = strconv.ParseInt(tot, 10, 64); err != nil {
			return 0, 0, false
		}
	}
	return start, total, true
}

// install makes a the current attempt, unless Close came first.
func (b *httpBody) install(a *httpAttempt) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		a.close()
		return errdefs.ErrClosed
	}
	b.cur = a
	return nil
}

func (b *httpBody) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

func (b *httpBody) Read(p []byte) (int, error) {
	if b.isClosed() {
		return 0, errdefs.ErrClosed
	}
	if b.err != nil {
		return 0, b.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	for {
		a := b.cur
		a.timer.Reset(b.src.stall)
		n, err := a.resp.Body.Read(p)
		a.timer.Stop()
		b.got += int64(n)
		if n > 0 {
			b.progressed()
		}
		if err == nil {
			return n, nil
		}
		cause, retryable := b.classify(a, err)
		if !retryable {
			b.err = cause
			return n, cause
		}
		a.close()
		if cerr := b.resume(cause); cerr != nil {
			b.err = cerr
			return n, cerr
		}
		if n > 0 {
			return n, nil
		}
	}
}

// resume reconnects after a broken transfer, or says why it cannot.
func (b *httpBody) resume(cause error) error {
	if !b.pin.pinned() {
		// Without a validator a resumed body could belong to another
		// version of the object; start over instead (it still counts as a
		// retry, so a server that keeps dropping cannot loop forever).
		if werr := b.wait(cause, 0); werr != nil {
			return werr
		}
		return &RestartError{URL: b.src.redacted, Offset: b.got, Why: "the server gave no ETag or Last-Modified to resume safely",
			Reason: fmt.Sprintf("%v, and the server gave no ETag or Last-Modified to resume safely", cause)}
	}
	if werr := b.wait(cause, 0); werr != nil {
		return werr
	}
	return b.connect()
}

// classify maps the transport's end-of-body or error into what the engine
// sees and whether a retry may help. A short body is never a clean io.EOF,
// and never wraps io.ErrUnexpectedEOF either: readers up the pipeline
// (io.ReadFull users) treat that value as a normal short end.
func (b *httpBody) classify(a *httpAttempt, err error) (error, bool) {
	name := b.src.redacted
	if err == io.EOF {
		if b.size >= 0 && b.got != b.size {
			return fmt.Errorf("GET %s: %w after %d of %d bytes: %w", name, errDropped, b.got, b.size, errdefs.ErrSourceUnreachable), true
		}
		return io.EOF, false
	}
	if perr := b.parent.Err(); perr != nil {
		return ctxio.Cancelled("reading "+name, perr), false
	}
	if context.Cause(a.ctx) == a.stallErr {
		return a.stallErr, true
	}
	if b.isClosed() {
		return errdefs.ErrClosed, false
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		if b.size >= 0 {
			return fmt.Errorf("GET %s: %w after %d of %d bytes: %w: %w", name, errDropped, b.got, b.size, errdefs.ErrSourceUnreachable, noShortRead(err)), true
		}
		return fmt.Errorf("GET %s: %w after %d bytes (total size unknown): %w: %w", name, errDropped, b.got, errdefs.ErrSourceUnreachable, noShortRead(err)), true
	}
	return fmt.Errorf("GET %s: reading body after %d bytes: %w: %w", name, b.got, errdefs.ErrSourceUnreachable, err), true
}

// Close may be called from another goroutine to abort a blocked Read or a
// retry wait.
func (b *httpBody) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	a := b.cur
	b.mu.Unlock()
	b.kill(errdefs.ErrClosed)
	if a != nil {
		a.timer.Stop()
		err := a.resp.Body.Close()
		a.cancel(errdefs.ErrClosed)
		return err
	}
	return nil
}

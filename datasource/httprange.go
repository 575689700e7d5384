package datasource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/ctxio"
	"github.com/diskimport/engine/internal/retry"
)

// rangeIdleConns is how many keep-alive connections a range reader keeps
// per host: qemu-img keeps several reads in flight.
const rangeIdleConns = 16

// RangeReader reads an HTTP object at random with Range requests, through
// the source's own client settings (credentials, extra headers, CA, redirect
// policy, retries). Every read is pinned to the object first seen: it sends
// If-Range with the first response's validator and accepts only a 206 for
// exactly the asked range of an object of the same size, so a replaced
// object fails the read instead of mixing two. It is safe for concurrent
// use.
type RangeReader struct {
	src       *httpSource
	url       *url.URL
	withCreds bool
	size      int64
	pin       objectPin
	closeIdle func() // drops the idle connections of a transport of our own
	client    *http.Client
	ctx       context.Context
	cancel    context.CancelFunc
}

// Probe reads the object's first byte with a range request: nil proves the
// server answers 206 with the range asked for and (through Content-Range)
// that the object still has the size the first response gave. A server may
// advertise "Accept-Ranges: bytes" and answer a range with the whole object.
func (r *RangedURL) Probe(ctx context.Context) error {
	rr, err := r.Open(ctx)
	if err != nil {
		return err
	}
	defer rr.Close()
	var first [1]byte
	if _, err := rr.ReadAt(first[:], 0); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// Open returns a reader for the object, or an error when this RangedURL
// came from elsewhere than an HTTP source of this package. Reads stop when
// ctx ends or Close is called.
func (r *RangedURL) Open(ctx context.Context) (*RangeReader, error) {
	if r == nil || r.src == nil {
		return nil, fmt.Errorf("ranged URL has no HTTP source to read it with: %w", errdefs.ErrInvalidOptions)
	}
	s := r.src
	u, err := url.Parse(r.URL)
	if err != nil {
		return nil, fmt.Errorf("ranged URL: %w: %w", errdefs.ErrInvalidOptions, err)
	}
	client := &http.Client{Transport: s.client.Transport, CheckRedirect: s.checkRedirect}
	closeIdle := func() {}
	// The single streaming GET runs without keep-alives; random reads want
	// them, on a transport of their own that Close can empty. A caller's
	// transport is used as it is.
	if own, ok := s.client.Transport.(*http.Transport); ok {
		tr := own.Clone()
		tr.DisableKeepAlives = false
		tr.MaxIdleConnsPerHost = rangeIdleConns
		tr.MaxIdleConns = rangeIdleConns
		oneRequestPerConnection(tr)
		client.Transport, closeIdle = tr, tr.CloseIdleConnections
	}
	ctx, cancel := context.WithCancel(ctx)
	return &RangeReader{
		src:       s,
		url:       u,
		withCreds: origin(u) == s.origin, // the redirect policy's rule
		size:      r.Size,
		pin:       r.pin,
		closeIdle: closeIdle,
		client:    client,
		ctx:       ctx,
		cancel:    cancel,
	}, nil
}

// Size is the object's length in bytes.
func (r *RangeReader) Size() int64 { return r.size }

// Close aborts reads in progress and drops the idle connections.
func (r *RangeReader) Close() error {
	r.cancel()
	r.closeIdle()
	return nil
}

// ReadAt reads len(p) bytes at off (fewer, with io.EOF, at the end of the
// object), retrying transient failures like the streaming path does.
func (r *RangeReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("GET %s: negative offset %d: %w", r.src.redacted, off, errdefs.ErrInvalidOptions)
	}
	if off >= r.size {
		return 0, io.EOF
	}
	want := p[:min(int64(len(p)), r.size-off)]
	if len(want) == 0 {
		return 0, nil
	}
	if err := r.fill(len(want), off, func() ([]byte, error) { return want, nil }, nil, nil); err != nil {
		return 0, err
	}
	if len(want) < len(p) {
		return len(want), io.EOF
	}
	return len(want), nil
}

// fill reads exactly n bytes at off, within the object, into the buffer
// dst gives. dst is called once, when the first response's header has
// arrived, so a caller may wait there for a buffer while the server's
// first-byte delay has already passed. A broken transfer is resumed at the
// first byte it did not deliver, so a retry fetches only the rest of the
// range. progress, when not nil, is called with the count of bytes filled
// so far each time it grows. handBack, when not nil, is asked about a
// retryable failure that came before dst was called: when it says yes,
// fill returns a *handedBack at once instead of retrying.
func (r *RangeReader) fill(n int, off int64, dst func() ([]byte, error), progress func(int), handBack func(error) bool) error {
	streak := r.newStreak(off)
	var p []byte
	got := 0
	rest := func() ([]byte, error) {
		if p == nil {
			b, err := dst()
			if err != nil {
				return nil, err
			}
			p = b[:n]
		}
		return p[got:], nil
	}
	for {
		k, err := r.fetch(n-got, off+int64(got), rest, func(k int) {
			if progress != nil {
				progress(got + k)
			}
		})
		got += k
		if k > 0 {
			streak.Reset()
		}
		if err == nil {
			return nil
		}
		var re *retryable
		if !errors.As(err, &re) {
			return err
		}
		if p == nil && handBack != nil && handBack(re.err) {
			return &handedBack{err: re.err}
		}
		if werr := streak.Wait(r.ctx, re.err, re.hint); werr != nil {
			if perr := r.ctx.Err(); perr != nil {
				return ctxio.Cancelled("reading "+r.src.redacted, perr)
			}
			return werr
		}
	}
}

// handedBack: fill gave its range back, unread, instead of retrying the
// refusal err (its handBack said another connection takes the range).
type handedBack struct{ err error }

func (e *handedBack) Error() string { return "range handed back: " + e.err.Error() }

func (e *handedBack) Unwrap() error { return e.err }

// rangeRefused: a range request was answered with something else than that
// range of the object first seen. changed says the answer is another
// object (its validator or size differs); otherwise the server ignored
// the range, or answered it in a way that cannot be checked.
type rangeRefused struct {
	changed bool
	err     error
}

func (e *rangeRefused) Error() string { return e.err.Error() }

func (e *rangeRefused) Unwrap() error { return e.err }

// changed reports whether a full answer to a range request carries another
// validator than the object first seen (If-Range sent the first one, so a
// server that honours it answers 200 exactly when the object changed).
func (r *RangeReader) changed(resp *http.Response) bool {
	if v, _ := r.pin.check(resp.Header); v == otherObject {
		return true
	}
	return resp.ContentLength >= 0 && resp.ContentLength != r.size
}

// checkPartial refuses a 206 that is not exactly bytes off..off+n-1 of the
// object first seen: another version (by its validators, its Content-Range
// or its length), a version it cannot tell, or an encoded body.
func (r *RangeReader) checkPartial(resp *http.Response, n int, off int64) error {
	name, end := r.src.redacted, off+int64(n)-1
	cr := resp.Header.Get("Content-Range")
	start, total, ok := parseContentRange(cr)
	if !ok || start != off || total != r.size || (resp.ContentLength >= 0 && resp.ContentLength != int64(n)) {
		return &rangeRefused{changed: true, err: fmt.Errorf("GET %s bytes %d-%d: unexpected Content-Range %q for a %d-byte object (the object changed while reading?): %w",
			name, off, end, cr, r.size, errdefs.ErrSourceUnreachable)}
	}
	switch v, why := r.pin.check(resp.Header); v {
	case otherObject:
		return &rangeRefused{changed: true, err: fmt.Errorf("GET %s bytes %d-%d: the object changed while reading (%s): %w", name, off, end, why, errdefs.ErrSourceUnreachable)}
	case unverifiable:
		r.src.rangesUnverifiable.CompareAndSwap(nil, &why)
		return &rangeRefused{err: fmt.Errorf("GET %s bytes %d-%d: the range cannot be shown to be of the object first seen (%s): %w", name, off, end, why, errdefs.ErrSourceUnreachable)}
	}
	if ce := unaskedEncoding(resp.Header); ce != "" {
		return &rangeRefused{err: fmt.Errorf("GET %s bytes %d-%d: the server answered with Content-Encoding %q, which was not asked for: %w", name, off, end, ce, errdefs.ErrSourceUnreachable)}
	}
	return nil
}

// retryable marks a failure another try may fix.
type retryable struct {
	err  error
	hint time.Duration // Retry-After
}

func (e *retryable) Error() string { return e.err.Error() }

func (e *retryable) Unwrap() error { return e.err }

// newStreak paces the failures of one ReadAt, logging each retry; the
// retry count is the source's, shared with the streaming path.
func (r *RangeReader) newStreak(off int64) *retry.Streak {
	s := r.src
	return s.budget.Streak(func(a retry.Attempt) {
		s.log.Warn("HTTP range read failed, retrying", s.retryNotice(a, off).Attr())
	})
}

// fetch sends one range GET for p at off and reads the body into p,
// calling progress with the bytes read so far; it returns how many it
// read. A failure worth retrying comes back as *retryable; one that says
// the server no longer serves this object's ranges as a *rangeRefused.
func (r *RangeReader) fetch(n int, off int64, dst func() ([]byte, error), progress func(int)) (int, error) {
	s := r.src
	name := s.redacted
	end := off + int64(n) - 1
	ctx, cancel := context.WithCancelCause(r.ctx)
	defer cancel(nil)
	stallErr := fmt.Errorf("GET %s bytes %d-%d: %w for %s: %w", name, off, end, errNoData, s.stall, errdefs.ErrSourceUnreachable)
	// The watchdog is re-armed whenever bytes arrive.
	timer := time.AfterFunc(s.stall, func() { cancel(stallErr) })
	defer timer.Stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url.String(), nil)
	if err != nil {
		return 0, fmt.Errorf("building request for %s: %w: %w", name, errdefs.ErrInvalidOptions, err)
	}
	s.decorate(req, r.withCreds)
	req.Header.Set("Range", "bytes="+strconv.FormatInt(off, 10)+"-"+strconv.FormatInt(end, 10))
	req.Header.Set("If-Range", r.pin.ifRange())
	resp, err := r.client.Do(req)
	if err != nil {
		if context.Cause(ctx) == stallErr {
			return 0, &retryable{err: stallErr}
		}
		err = s.requestError(r.ctx, ctx, err)
		if errors.Is(err, errdefs.ErrCancelled) || permanentTransportError(err) {
			return 0, err
		}
		return 0, &retryable{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
			return 0, &rangeRefused{changed: r.changed(resp), err: fmt.Errorf("GET %s bytes %d-%d: the server answered %q instead of 206 Partial Content: the object changed while reading, or the server stopped serving ranges: %w",
				name, off, end, resp.Status, errdefs.ErrSourceUnreachable)}
		}
		serr := &errdefs.HTTPStatusError{URL: name, StatusCode: resp.StatusCode, Status: resp.Status}
		if retryableStatus(resp.StatusCode) {
			return 0, &retryable{err: serr, hint: retryAfter(resp)}
		}
		return 0, fmt.Errorf("GET %s bytes %d-%d: %w", name, off, end, serr)
	}
	if err := r.checkPartial(resp, n, off); err != nil {
		return 0, err
	}
	// No stall while the caller waits for its buffer.
	timer.Stop()
	p, err := dst()
	if err != nil {
		return 0, err
	}
	timer.Reset(s.stall)
	got := 0
	for got < len(p) {
		n, err := resp.Body.Read(p[got:])
		got += n
		if n > 0 {
			timer.Reset(s.stall)
			progress(got)
		}
		if err != nil {
			if got == len(p) && err == io.EOF {
				break
			}
			if perr := r.ctx.Err(); perr != nil {
				return got, ctxio.Cancelled("reading "+name, perr)
			}
			if context.Cause(ctx) == stallErr {
				return got, &retryable{err: stallErr}
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return got, &retryable{err: fmt.Errorf("GET %s bytes %d-%d: %w after %d bytes: %w: %w",
				name, off, end, errDropped, got, errdefs.ErrSourceUnreachable, noShortRead(err))}
		}
	}
	return got, nil
}

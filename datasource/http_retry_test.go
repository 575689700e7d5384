package datasource_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/bubblenet"
)

// fastRetry makes retries quick enough for tests.
func fastRetry(o datasource.Config) datasource.Config {
	o.RetryBackoff = 5 * time.Millisecond
	if o.Logger == nil {
		o.Logger = testLogger()
	}
	return o
}

func testLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// cutWriter passes at most left body bytes, then flushes and kills the
// connection mid-body, like a server or proxy dying.
type cutWriter struct {
	http.ResponseWriter
	left int
}

func (c *cutWriter) Write(p []byte) (int, error) {
	if len(p) > c.left {
		c.ResponseWriter.Write(p[:c.left])
		c.ResponseWriter.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // net/http drops the connection
	}
	c.left -= len(p)
	return c.ResponseWriter.Write(p)
}

// flakyServer serves the current object with an ETag and Range support;
// its first `drops` responses die after cut body bytes. It records each
// request's Range and If-Range.
type flakyServer struct {
	mu       sync.Mutex
	data     []byte
	etag     string
	drops    int
	cut      int
	noRanges bool // answer every request with the full object (200)
	noETag   bool
	requests []http.Header
}

func (f *flakyServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r.Header.Clone())
	data, etag, drop, cut, noRanges, noETag := f.data, f.etag, f.drops > 0, f.cut, f.noRanges, f.noETag
	if drop {
		f.drops--
	}
	f.mu.Unlock()
	if !noETag {
		w.Header().Set("ETag", etag)
	}
	if drop {
		w = &cutWriter{ResponseWriter: w, left: cut}
	}
	if noRanges {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.WriteHeader(http.StatusOK)
		w.Write(data)
		return
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
}

func (f *flakyServer) seen() []http.Header {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]http.Header(nil), f.requests...)
}

func TestHTTPResumesAfterDrops(t *testing.T) {
	data := testImage(t, 1<<20)
	f := &flakyServer{data: data, etag: `"v1"`, drops: 3, cut: 100 << 10}
	srv := newServer(t, f)
	src, err := datasource.NewHTTP(srv.URL, fastRetry(datasource.Config{}))
	require.NoError(t, err)
	st, got, err := readAll(t, src)
	require.NoError(t, err)
	assert.Equal(t, int64(len(data)), st.Size)
	assert.Equal(t, sum(data), sum(got))
	assert.Equal(t, 3, retriesOf(src))
	reqs := f.seen()
	require.Len(t, reqs, 4)
	assert.Empty(t, reqs[0].Get("Range"))
	for i, h := range reqs[1:] {
		// Each response died after cut bytes, so resumes ask for cut*(i+1).
		assert.Equal(t, "bytes="+strconv.Itoa(f.cut*(i+1))+"-", h.Get("Range"))
		assert.Equal(t, `"v1"`, h.Get("If-Range"))
	}
}

func TestHTTPResumesAfterStall(t *testing.T) {
	data := testImage(t, 256<<10)
	var n atomic.Int32
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
		if n.Add(1) == 1 {
			stallHandler(data[:8192], len(data))(w, r)
			return
		}
		http.ServeContent(w, r, "", time.Date(2006, 1, 2, 15, 4, 5, 0, time.UTC), bytes.NewReader(data))
	}))
	src, err := datasource.NewHTTP(srv.URL, fastRetry(datasource.Config{Access: datasource.Access{StallTimeout: 200 * time.Millisecond}}))
	require.NoError(t, err)
	requireContent(t, src, data)
	assert.Equal(t, 1, retriesOf(src))
}

// TestHTTPRetriesServerErrorsOnOpen: a 503 and a 429 are retried, the
// 429's Retry-After honoured (in a bubble: its second is the bubble's, so
// neither a fast nor a loaded machine changes what is measured).
func TestHTTPRetriesServerErrorsOnOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		data := testImage(t, 64<<10)
		var n atomic.Int32
		tr := bubblenet.HTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch n.Add(1) {
			case 1:
				http.Error(w, "down", http.StatusServiceUnavailable)
			case 2:
				w.Header().Set("Retry-After", "1")
				http.Error(w, "slow down", http.StatusTooManyRequests)
			default:
				serveBytes(data)(w, r)
			}
		}))
		src, err := datasource.NewHTTP(bubblenet.URL, fastRetry(datasource.Config{Transport: tr}))
		require.NoError(t, err)
		start := time.Now()
		requireContent(t, src, data)
		assert.Equal(t, 2, retriesOf(src))
		assert.GreaterOrEqual(t, time.Since(start), time.Second, "Retry-After: 1 was not honoured")
	})
}

func TestHTTPPermanentStatusNotRetried(t *testing.T) {
	for _, code := range []int{401, 403, 404, 410} {
		var n atomic.Int32
		srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			http.Error(w, "no", code)
		}))
		src, err := datasource.NewHTTP(srv.URL, fastRetry(datasource.Config{}))
		require.NoError(t, err)
		_, err = src.Open(context.Background())
		var se *errdefs.HTTPStatusError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, code, se.StatusCode)
		assert.Equal(t, int32(1), n.Load(), "status %d was retried", code)
		assert.Equal(t, 0, retriesOf(src))
	}
}

func TestHTTPRetryBudgetExhausted(t *testing.T) {
	data := testImage(t, 64<<10)
	f := &flakyServer{data: data, etag: `"v1"`, drops: 1000, cut: 1000}
	srv := newServer(t, f)
	src, err := datasource.NewHTTP(srv.URL, fastRetry(datasource.Config{Retries: 4}))
	require.NoError(t, err)
	_, got, err := readAll(t, src)
	require.Error(t, err)
	assert.ErrorIs(t, err, errdefs.ErrSourceUnreachable)
	assert.Contains(t, err.Error(), "gave up after 4 retries")
	assert.Len(t, f.seen(), 5)
	// What was delivered is a correct prefix, never garbage.
	assert.Equal(t, data[:len(got)], got)
	assert.Equal(t, 5000, len(got))

}

// TestHTTPRetryStreakBoundedInTime: one streak of failures may not exceed
// RetryMaxElapsed, however many retries the budget still holds (in a
// bubble, so the bound is checked on a clock no load can stretch).
func TestHTTPRetryStreakBoundedInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &flakyServer{data: testImage(t, 64<<10), etag: `"v1"`, drops: 1000, cut: 0} // no progress at all: one long streak
		tr := bubblenet.HTTP(t, f)
		src, err := datasource.NewHTTP(bubblenet.URL, datasource.Config{Transport: tr, Retries: 1000, Access: datasource.Access{
			RetryBackoff:    100 * time.Millisecond,
			RetryMaxElapsed: 300 * time.Millisecond,
		},
			Logger: testLogger()})
		require.NoError(t, err)
		start := time.Now()
		_, _, err = readAll(t, src)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "gave up after retrying for")
		assert.LessOrEqual(t, time.Since(start), 300*time.Millisecond)
		assert.Less(t, len(f.seen()), 10, "retried until the budget, not the time, ran out")
	})
}

func TestHTTPServerIgnoringRangesRestarts(t *testing.T) {
	data := testImage(t, 256<<10)
	f := &flakyServer{data: data, etag: `"v1"`, drops: 1, cut: 50 << 10, noRanges: true}
	srv := newServer(t, f)
	src, err := datasource.NewHTTP(srv.URL, fastRetry(datasource.Config{}))
	require.NoError(t, err)
	_, got, err := readAll(t, src)
	require.Error(t, err)
	assert.ErrorIs(t, err, errdefs.ErrRestart)
	var re *datasource.RestartError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, int64(50<<10), re.Offset)
	assert.Contains(t, err.Error(), "instead of 206")
	assert.Equal(t, data[:50<<10], got, "no byte of the 200 answer may leak into the stream")
	// A fresh Open reads the whole object.
	requireContent(t, src, data)
	assert.Equal(t, 1, retriesOf(src))
}

func TestHTTPObjectChangedRestarts(t *testing.T) {
	v1 := testImage(t, 256<<10)
	v2 := bytes.Repeat([]byte("new!"), 64<<10)
	f := &flakyServer{data: v1, etag: `"v1"`, drops: 1, cut: 50 << 10}
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The object is replaced right after the first (dropped) response;
		// a deferred call runs even when the handler aborts the connection.
		defer func() {
			f.mu.Lock()
			f.data, f.etag = v2, `"v2"`
			f.mu.Unlock()
		}()
		f.ServeHTTP(w, r)
	}))
	src, err := datasource.NewHTTP(srv.URL, fastRetry(datasource.Config{}))
	require.NoError(t, err)
	_, got, err := readAll(t, src)
	require.ErrorIs(t, err, errdefs.ErrRestart)
	assert.Contains(t, err.Error(), `the object changed (ETag "v2", was "v1")`)
	assert.Equal(t, v1[:50<<10], got)
	requireContent(t, src, v2)
}

func TestHTTPNoValidatorRestarts(t *testing.T) {
	data := testImage(t, 128<<10)
	f := &flakyServer{data: data, drops: 1, cut: 10 << 10, noETag: true}
	srv := newServer(t, f)
	src, err := datasource.NewHTTP(srv.URL, fastRetry(datasource.Config{}))
	require.NoError(t, err)
	_, _, err = readAll(t, src)
	require.ErrorIs(t, err, errdefs.ErrRestart)
	assert.Contains(t, err.Error(), "no ETag or Last-Modified")
	assert.Len(t, f.seen(), 1, "an unguarded range request was sent")
}

// TestHTTPCloseDuringRetryWait: a Close or a cancel ends a read that is
// waiting out a retry delay at once, not when the delay ends (in a bubble:
// at exactly the moment of the Close, the delay being seconds).
func TestHTTPCloseDuringRetryWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		data := testImage(t, 64<<10)
		f := &flakyServer{data: data, etag: `"v1"`, drops: 1000, cut: 1000}
		tr := bubblenet.HTTP(t, f)
		src, err := datasource.NewHTTP(bubblenet.URL, datasource.Config{Transport: tr, Access: datasource.Access{RetryBackoff: 10 * time.Second}, Logger: testLogger()})
		require.NoError(t, err)
		st, err := src.Open(context.Background())
		require.NoError(t, err)
		time.AfterFunc(200*time.Millisecond, func() { st.Body.Close() })
		start := time.Now()
		_, err = io.Copy(io.Discard, st.Body)
		require.Error(t, err)
		assert.Equal(t, 200*time.Millisecond, time.Since(start))

		ctx, cancel := context.WithCancel(context.Background())
		st, err = src.Open(ctx)
		require.NoError(t, err)
		defer st.Body.Close()
		time.AfterFunc(200*time.Millisecond, cancel)
		start = time.Now()
		_, err = io.Copy(io.Discard, st.Body)
		assert.ErrorIs(t, err, errdefs.ErrCancelled)
		assert.False(t, errors.Is(err, errdefs.ErrRestart))
		assert.Equal(t, 200*time.Millisecond, time.Since(start))
	})
}

// retriesOf is src's retry count as an import reads it (a RetryReporter's,
// else 0).
func retriesOf(src datasource.Source) int {
	if r, ok := src.(datasource.RetryReporter); ok {
		return r.Retries()
	}
	return 0
}

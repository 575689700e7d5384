package datasource_test

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/bubblenet"
)

// newServer starts an httptest server on 127.0.0.1 closed at cleanup.
func newServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// openFails opens an HTTP source of url and returns the error its Open
// must fail with.
func openFails(t *testing.T, url string, cfg datasource.Config) error {
	t.Helper()
	src, err := datasource.NewHTTP(url, cfg)
	require.NoError(t, err)
	_, err = src.Open(context.Background())
	require.Error(t, err)
	return err
}

// serveBytes serves data as a file server does: with its ranges and a
// Last-Modified that pins them.
func serveBytes(data []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "image.qcow2", time.Unix(1.7e9, 0), bytes.NewReader(data))
	}
}

// seen records the request headers a handler received.
type seen struct {
	mu  sync.Mutex
	hdr []http.Header
}

func (s *seen) add(r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hdr = append(s.hdr, r.Header.Clone())
}

func (s *seen) all() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.hdr...)
}

// readSeenOnce reads src whole, checks it delivered data, and returns the
// headers of the one request rec saw.
func readSeenOnce(t *testing.T, src datasource.Source, data []byte, rec *seen) http.Header {
	t.Helper()
	requireContent(t, src, data)
	h := rec.all()
	require.Len(t, h, 1)
	return h[0]
}

func TestHTTPOK(t *testing.T) {
	data := testImage(t, 3<<20+17)
	var rec seen
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		serveBytes(data)(w, r)
	}))
	// One connection: one GET per Open.
	src, err := datasource.NewHTTP(srv.URL+"/disk.img", datasource.Config{Access: datasource.Access{Connections: 1}})
	require.NoError(t, err)
	for range 2 { // HTTP sources can be reopened
		st, got, err := readAll(t, src)
		require.NoError(t, err)
		assert.Equal(t, sum(data), sum(got))
		assert.Equal(t, int64(len(data)), st.Size)
		assert.Empty(t, st.LocalPath)
	}
	h := rec.all()
	require.Len(t, h, 2)
	assert.Equal(t, "diskimport-engine", h[0].Get("User-Agent"))
	assert.Empty(t, h[0].Get("Authorization"))
	assert.Empty(t, h[0].Get("Accept-Encoding"), "bytes must come as stored")
}

func TestHTTPUnknownLength(t *testing.T) {
	data := testImage(t, 200<<10)
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Flushing first forces chunked encoding: no Content-Length.
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		w.Write(data)
	}))
	src, err := datasource.NewHTTP(srv.URL, datasource.Config{})
	require.NoError(t, err)
	st, got, err := readAll(t, src)
	require.NoError(t, err)
	assert.Equal(t, int64(-1), st.Size)
	assert.Equal(t, sum(data), sum(got))
}

func TestHTTPBasicAuthAndHeaders(t *testing.T) {
	data := testImage(t, 64<<10)
	var rec seen
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		if u, p, ok := r.BasicAuth(); !ok || u != "alice" || p != "s3cret" {
			http.Error(w, "denied", http.StatusUnauthorized)
			return
		}
		serveBytes(data)(w, r)
	}))
	src, err := datasource.NewHTTP(srv.URL+"/x", datasource.Config{
		Access: datasource.Access{
			Username: "alice",
			Password: "s3cret",
			Headers:  []string{"X-Token: abc def", "X-Multi: 1", "X-Multi: 2"},
		},
		UserAgent: "test-agent/1",
	})
	require.NoError(t, err)
	h := readSeenOnce(t, src, data, &rec)
	assert.Equal(t, "abc def", h.Get("X-Token"))
	assert.Equal(t, []string{"1", "2"}, h.Values("X-Multi"))
	assert.Equal(t, "test-agent/1", h.Get("User-Agent"))

	// Wrong password: the server's 401 is a refusal.
	src, err = datasource.NewHTTP(srv.URL+"/x", datasource.Config{Access: datasource.Access{Username: "alice", Password: "bad"}})
	require.NoError(t, err)
	_, err = src.Open(context.Background())
	var se *errdefs.HTTPStatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusUnauthorized, se.StatusCode)
}

func TestHTTPCredentialsFromURLAreRedacted(t *testing.T) {
	data := testImage(t, 8192)
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "bob" || p != "pw123" {
			http.Error(w, "denied", http.StatusUnauthorized)
			return
		}
		serveBytes(data)(w, r)
	}))
	raw := "http://bob:pw123@" + srv.Listener.Addr().String() + "/d.img?X-Amz-Signature=deadbeef&v=2"
	src, err := datasource.NewHTTP(raw, datasource.Config{})
	require.NoError(t, err)
	assert.NotContains(t, src.String(), "pw123")
	assert.NotContains(t, src.String(), "deadbeef")
	assert.Contains(t, src.String(), "d.img?X-Amz-Signature=REDACTED&v=REDACTED", "every query value is hidden, the names stay")
	_, got, err := readAll(t, src)
	require.NoError(t, err)
	assert.Equal(t, data, got)
}

func TestHTTPMalformedOptions(t *testing.T) {
	for _, hdr := range []string{"no colon here", ": value", "Bad Name: v", "X-Ok: a\nInjected: b"} {
		_, err := datasource.NewHTTP("http://127.0.0.1/x", datasource.Config{Access: datasource.Access{Headers: []string{hdr}}})
		require.Error(t, err, hdr)
		assert.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	}
	for _, u := range []string{"ftp://h/x", "http:///nohost", "::bad"} {
		_, err := datasource.NewHTTP(u, datasource.Config{})
		assert.ErrorIs(t, err, errdefs.ErrInvalidOptions, u)
	}
}

func TestHTTPRedirectSameHostKeepsAuth(t *testing.T) {
	data := testImage(t, 100<<10)
	var rec seen
	mux := http.NewServeMux()
	mux.HandleFunc("/start", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/middle", http.StatusFound)
	})
	mux.HandleFunc("/middle", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/data", http.StatusMovedPermanently)
	})
	mux.HandleFunc("/data", func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		if u, p, ok := r.BasicAuth(); !ok || u != "alice" || p != "pw" {
			http.Error(w, "denied", http.StatusUnauthorized)
			return
		}
		serveBytes(data)(w, r)
	})
	srv := newServer(t, mux)
	src, err := datasource.NewHTTP(srv.URL+"/start", datasource.Config{
		Access: datasource.Access{
			Username: "alice",
			Password: "pw",
			Headers:  []string{"X-Extra: yes"},
		},
	})
	require.NoError(t, err)
	h := readSeenOnce(t, src, data, &rec)
	assert.Equal(t, "yes", h.Get("X-Extra"))
}

func TestHTTPRedirectOtherHostDropsAuth(t *testing.T) {
	data := testImage(t, 100<<10)
	var rec seen
	other := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		serveBytes(data)(w, r)
	}))
	origin := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := r.BasicAuth(); !ok {
			http.Error(w, "denied", http.StatusUnauthorized)
			return
		}
		// Same IP, different port: a different host for credentials.
		http.Redirect(w, r, other.URL+"/blob", http.StatusTemporaryRedirect)
	}))
	var logs bytes.Buffer
	src, err := datasource.NewHTTP(origin.URL+"/img", datasource.Config{
		Access: datasource.Access{
			Username: "alice",
			Password: "pw",
			Headers:  []string{"X-Extra: yes", "Authorization: Bearer tok", "Cookie: c=1"},
		},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	require.NoError(t, err)
	h := readSeenOnce(t, src, data, &rec)
	assert.Empty(t, h.Get("Authorization"))
	assert.Empty(t, h.Get("Cookie"))
	assert.Empty(t, h.Get("X-Extra"), "extra headers are scoped to the origin like credentials")
	assert.Equal(t, "diskimport-engine", h.Get("User-Agent"))
	assert.Contains(t, logs.String(), "not sending credentials")
}

func TestHTTPTooManyRedirects(t *testing.T) {
	var srv *httptest.Server
	srv = newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		http.Redirect(w, r, fmt.Sprintf("/?n=%d", n+1), http.StatusFound)
	}))
	err := openFails(t, srv.URL+"/?n=0", datasource.Config{})
	assert.ErrorIs(t, err, errdefs.ErrSourceRefused)
	assert.Contains(t, err.Error(), "10 redirects")
}

func TestHTTPStatusErrors(t *testing.T) {
	for _, code := range []int{http.StatusNotFound, http.StatusInternalServerError} {
		srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "nope", code)
		}))
		err := openFails(t, srv.URL+"/missing.img", datasource.Config{Retries: -1})
		var se *errdefs.HTTPStatusError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, code, se.StatusCode)
		assert.ErrorIs(t, err, errdefs.ErrSourceRefused)
		want := fmt.Sprintf("%d %s", code, http.StatusText(code))
		assert.Contains(t, err.Error(), want)
	}
}

func TestHTTPRefusedConnection(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL
	srv.Close() // nothing listens on that port any more
	err := openFails(t, u+"/x", datasource.Config{Retries: -1})
	assert.ErrorIs(t, err, errdefs.ErrSourceUnreachable)
	assert.Contains(t, err.Error(), "refused")
}

func TestHTTPShortBody(t *testing.T) {
	data := testImage(t, 1000)
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: application/octet-stream\r\n\r\n", len(data))
		buf.Write(data[:400])
		buf.Flush()
	}))
	src, err := datasource.NewHTTP(srv.URL, datasource.Config{Retries: -1})
	require.NoError(t, err)
	st, got, err := readAll(t, src)
	require.Error(t, err)
	assert.Equal(t, int64(1000), st.Size)
	assert.Equal(t, data[:400], got)
	assert.False(t, errors.Is(err, io.EOF), "a short body must not look like a clean end")
	assert.ErrorIs(t, err, errdefs.ErrSourceUnreachable)
	assert.Contains(t, err.Error(), "connection closed after 400 of 1000 bytes")
}

// stallHandler sends head bytes, then goes silent until the client leaves.
func stallHandler(head []byte, total int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(total))
		w.Write(head)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}
}

// TestHTTPStall: a server that goes silent mid-body is given up on exactly
// the stall timeout after its last byte (in a synctest bubble: the clock is
// the bubble's, so the duration is exact on any machine).
func TestHTTPStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		head := testImage(t, 4096)
		tr := bubblenet.HTTP(t, stallHandler(head, 1<<20))
		src, err := datasource.NewHTTP(bubblenet.URL, datasource.Config{Transport: tr, Access: datasource.Access{StallTimeout: 300 * time.Millisecond}, Retries: -1})
		require.NoError(t, err)
		start := time.Now()
		_, got, err := readAll(t, src)
		require.Error(t, err)
		assert.Equal(t, 300*time.Millisecond, time.Since(start))
		assert.Equal(t, head, got)
		assert.ErrorIs(t, err, errdefs.ErrSourceUnreachable)
		assert.Contains(t, err.Error(), "no data received for 300ms")
	})
}

// TestHTTPStallBeforeHeaders: a server that never answers is given up on
// exactly the stall timeout after the request (the bubble's clock).
func TestHTTPStallBeforeHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := bubblenet.HTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		}))
		src, err := datasource.NewHTTP(bubblenet.URL, datasource.Config{Transport: tr, Access: datasource.Access{StallTimeout: 200 * time.Millisecond}, Retries: -1})
		require.NoError(t, err)
		start := time.Now()
		_, err = src.Open(context.Background())
		require.Error(t, err)
		assert.Equal(t, 200*time.Millisecond, time.Since(start))
		assert.ErrorIs(t, err, errdefs.ErrSourceUnreachable)
		assert.Contains(t, err.Error(), "no data received for 200ms")
	})
}

// A consumer that pauses longer than the stall timeout between reads is
// not a stalled server.
// (In a bubble: the pauses take no real time, and the stall timer runs on
// the same clock as the consumer's sleeps.)
func TestHTTPSlowConsumerIsNotAStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		data := testImage(t, 64<<10)
		tr := bubblenet.HTTP(t, serveBytes(data))
		src, err := datasource.NewHTTP(bubblenet.URL, datasource.Config{Transport: tr, Access: datasource.Access{StallTimeout: 100 * time.Millisecond}})
		require.NoError(t, err)
		st, err := src.Open(context.Background())
		require.NoError(t, err)
		defer st.Body.Close()
		var got bytes.Buffer
		buf := make([]byte, 16<<10)
		for {
			n, err := st.Body.Read(buf)
			got.Write(buf[:n])
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			time.Sleep(250 * time.Millisecond)
		}
		assert.Equal(t, sum(data), sum(got.Bytes()))
	})
}

// TestHTTPContextCancelMidBody: a read blocked on a silent server returns
// the moment the context is cancelled (the bubble's clock: exactly when).
func TestHTTPContextCancelMidBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		head := testImage(t, 8192)
		tr := bubblenet.HTTP(t, stallHandler(head, 1<<20))
		src, err := datasource.NewHTTP(bubblenet.URL, datasource.Config{Transport: tr})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		st, err := src.Open(ctx)
		require.NoError(t, err)
		defer st.Body.Close()
		got := make([]byte, len(head))
		_, err = io.ReadFull(st.Body, got)
		require.NoError(t, err)
		assert.Equal(t, head, got)
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		_, err = st.Body.Read(got) // blocks until the cancel
		require.Error(t, err)
		assert.Equal(t, 100*time.Millisecond, time.Since(start))
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, err, errdefs.ErrCancelled)
		assert.NotErrorIs(t, err, errdefs.ErrSourceUnreachable)
	})
}

func TestHTTPContextCancelledBeforeOpen(t *testing.T) {
	srv := newServer(t, serveBytes([]byte("x")))
	src, err := datasource.NewHTTP(srv.URL, datasource.Config{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = src.Open(ctx)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestHTTPCloseUnblocksRead(t *testing.T) {
	srv := newServer(t, stallHandler([]byte("abc"), 100))
	src, err := datasource.NewHTTP(srv.URL, datasource.Config{})
	require.NoError(t, err)
	st, err := src.Open(context.Background())
	require.NoError(t, err)
	buf := make([]byte, 3)
	_, err = io.ReadFull(st.Body, buf)
	require.NoError(t, err)
	time.AfterFunc(100*time.Millisecond, func() { st.Body.Close() })
	_, err = st.Body.Read(buf)
	require.Error(t, err)
	assert.NotErrorIs(t, err, io.EOF)
}

// The answer's Content-Type goes with the transfer: the engine refuses a
// text page by it (package format); the source itself reads the bytes.
func TestHTTPTransferCarriesContentType(t *testing.T) {
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, "<html>login</html>")
	}))
	src, err := datasource.NewHTTP(srv.URL, datasource.Config{})
	require.NoError(t, err)
	st, err := src.Open(context.Background())
	require.NoError(t, err)
	defer st.Body.Close()
	assert.Equal(t, "text/html; charset=utf-8", st.ContentType)
	got, err := io.ReadAll(st.Body)
	require.NoError(t, err)
	assert.Equal(t, "<html>login</html>", string(got))
}

func writeCertPEM(t *testing.T, dir, name string, srv *httptest.Server) {
	t.Helper()
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
}

func TestHTTPSCertificates(t *testing.T) {
	data := testImage(t, 256<<10)
	srv := httptest.NewTLSServer(serveBytes(data))
	t.Cleanup(srv.Close)

	// The test CA is not in the system pool.
	err := openFails(t, srv.URL, datasource.Config{})
	assert.ErrorIs(t, err, errdefs.ErrSourceUnreachable)
	assert.Contains(t, err.Error(), "certificate")

	dir := t.TempDir()
	writeCertPEM(t, dir, "ca.pem", srv)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README.txt"), []byte("ignored"), 0o644))
	src, err := datasource.NewHTTP(srv.URL, datasource.Config{Access: datasource.Access{CertDir: dir}})
	require.NoError(t, err)
	st, got, err := readAll(t, src)
	require.NoError(t, err)
	assert.Equal(t, int64(len(data)), st.Size)
	assert.Equal(t, sum(data), sum(got))

	// Kubernetes configmap layout: tls.crt is a symlink into ..data/.
	kdir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(kdir, "..data"), 0o755))
	writeCertPEM(t, filepath.Join(kdir, "..data"), "tls.crt", srv)
	require.NoError(t, os.Symlink("..data/tls.crt", filepath.Join(kdir, "tls.crt")))
	src, err = datasource.NewHTTP(srv.URL, datasource.Config{Access: datasource.Access{CertDir: kdir}})
	require.NoError(t, err)
	_, got, err = readAll(t, src)
	require.NoError(t, err)
	assert.Equal(t, sum(data), sum(got))

	src, err = datasource.NewHTTP(srv.URL, datasource.Config{Access: datasource.Access{InsecureTLS: true}})
	require.NoError(t, err)
	requireContent(t, src, data)
}

func TestHTTPSCertDirErrors(t *testing.T) {
	_, err := datasource.NewHTTP("https://127.0.0.1/x", datasource.Config{Access: datasource.Access{CertDir: filepath.Join(t.TempDir(), "missing")}})
	assert.ErrorIs(t, err, errdefs.ErrInvalidOptions)

	empty := t.TempDir()
	_, err = datasource.NewHTTP("https://127.0.0.1/x", datasource.Config{Access: datasource.Access{CertDir: empty}})
	assert.ErrorIs(t, err, errdefs.ErrInvalidOptions)

	junk := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(junk, "bad.crt"), []byte("not a cert"), 0o644))
	_, err = datasource.NewHTTP("https://127.0.0.1/x", datasource.Config{Access: datasource.Access{CertDir: junk}})
	assert.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	assert.Contains(t, err.Error(), "no file with a parsable PEM certificate")
}

// Opening and closing many streams (read fully, closed early, stalled)
// must not leave goroutines behind. In a bubble, synctest.Wait returns once
// every goroutine the streams started has ended or is durably blocked, so
// the counts are taken when things have settled, not after a guessed
// pause; they count the bubble's goroutines alone, not the process's
// (another test's goroutine ending outside it once moved the count); and
// a goroutine still blocked when the servers are closed fails
// the bubble.
func TestHTTPNoGoroutineLeak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		data := testImage(t, 128<<10)
		fullTr := bubblenet.HTTP(t, serveBytes(data))
		stallTr := bubblenet.HTTP(t, stallHandler([]byte("abcd"), 1000))
		fullSrc, err := datasource.NewHTTP(bubblenet.URL, datasource.Config{Transport: fullTr})
		require.NoError(t, err)
		stallSrc, err := datasource.NewHTTP(bubblenet.URL, datasource.Config{Transport: stallTr, Access: datasource.Access{StallTimeout: 50 * time.Millisecond}, Retries: -1})
		require.NoError(t, err)

		cycle := func() {
			_, got, err := readAll(t, fullSrc)
			require.NoError(t, err)
			require.Equal(t, len(data), len(got))
			st, err := fullSrc.Open(context.Background())
			require.NoError(t, err)
			_, err = st.Body.Read(make([]byte, 10))
			require.NoError(t, err)
			require.NoError(t, st.Body.Close()) // closed early
			_, _, err = readAll(t, stallSrc)
			require.ErrorIs(t, err, errdefs.ErrSourceUnreachable)
		}
		cycle()
		synctest.Wait()
		base := bubblenet.Goroutines(t)
		for range 20 {
			cycle()
		}
		synctest.Wait()
		after := bubblenet.Goroutines(t)
		assert.LessOrEqual(t, after, base, "goroutines before %d after %d", base, after)
	})
}

// TestHTTPSToAPlainServerAsksWhetherItIsHTTP: https:// to a server that
// speaks plain HTTP fails at once (another try answers the same) and asks
// whether the URL should be http:// (before: Go's "first record does not
// look like a TLS handshake" alone, after the retries).
func TestHTTPSToAPlainServerAsksWhetherItIsHTTP(t *testing.T) {
	srv := newServer(t, serveBytes(testImage(t, 4096)))
	u := "https://" + srv.Listener.Addr().String() + "/disk.img"
	src, err := datasource.NewHTTP(u, datasource.Config{Access: datasource.Access{RetryBackoff: time.Millisecond}})
	require.NoError(t, err)
	_, err = src.Open(context.Background())
	require.ErrorIs(t, err, errdefs.ErrSourceUnreachable)
	assert.Contains(t, err.Error(), "is it http://, not https://?")
	assert.Zero(t, retriesOf(src))
}

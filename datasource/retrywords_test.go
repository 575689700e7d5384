package datasource_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/internal/retry"
)

// noticeLog records the retry notices of the records it handles and
// writes every record as slog's text handler does.
type noticeLog struct {
	mu      sync.Mutex
	notices []retry.Notice
	text    bytes.Buffer
}

func (l *noticeLog) logger() *slog.Logger { return slog.New(l) }

func (l *noticeLog) Enabled(context.Context, slog.Level) bool { return true }

func (l *noticeLog) Handle(ctx context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.Attrs(func(a slog.Attr) bool {
		if n, ok := a.Value.Any().(retry.Notice); ok && a.Value.Kind() == slog.KindLogValuer {
			l.notices = append(l.notices, n)
		}
		return true
	})
	return slog.NewTextHandler(&l.text, nil).Handle(ctx, r)
}

func (l *noticeLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *noticeLog) WithGroup(string) slog.Handler      { return l }

func (l *noticeLog) sentences() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var s []string
	for _, n := range l.notices {
		s = append(s, n.Sentence())
	}
	return s
}

// TestHTTPRetryNoticesSayWhatFailed: each retry's record carries a notice
// whose sentence tells a person what failed, where and how far the source
// was read (a connection dropped after 100 KiB, a 503, a stall), and the
// record keeps its keys for the log (url, retry, maxRetries, delay,
// offset, cause).
func TestHTTPRetryNoticesSayWhatFailed(t *testing.T) {
	data := testImage(t, 1<<20)
	var stalls atomic.Int32
	for _, c := range []struct {
		name    string
		handler http.Handler
		want    string
		offset  string
	}{
		{"dropped", &flakyServer{data: data, etag: `"v1"`, drops: 1, cut: 100 << 10},
			`^Connection to HOST dropped at 100\.0 KiB; retrying in 0\.0 s \(retry 1 of 10\)$`, "offset=102400"},
		{"503", func() http.Handler {
			var n atomic.Int32
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) == 1 {
					http.Error(w, "down", http.StatusServiceUnavailable)
					return
				}
				serveBytes(data)(w, r)
			})
		}(), `^HOST answered 503 Service Unavailable; retrying in 0\.0 s \(retry 1 of 10\)$`, "offset=0"},
		{"stall", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
			if stalls.Add(1) == 1 {
				stallHandler(data[:8192], len(data))(w, r)
				return
			}
			http.ServeContent(w, r, "", time.Date(2006, 1, 2, 15, 4, 5, 0, time.UTC), bytes.NewReader(data))
		}), `^HOST sent nothing for 200ms at 8\.0 KiB; retrying in 0\.0 s \(retry 1 of 10\)$`, "offset=8192"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := newServer(t, c.handler)
			u, err := url.Parse(srv.URL)
			require.NoError(t, err)
			var log noticeLog
			src, err := datasource.NewHTTP(srv.URL, fastRetry(datasource.Config{Logger: log.logger(),
				Access: datasource.Access{StallTimeout: 200 * time.Millisecond}}))
			require.NoError(t, err)
			requireContent(t, src, data)
			sentences := log.sentences()
			require.Len(t, sentences, 1, log.text.String())
			t.Log(sentences[0])
			assert.Regexp(t, strings.ReplaceAll(c.want, "HOST", regexp.QuoteMeta(u.Host)), sentences[0])
			assert.Regexp(t, `level=WARN msg="HTTP transfer failed, retrying" url=`+srv.URL+` retry=1 maxRetries=10 delay=[0-9.]+m?s `+c.offset+` cause="`,
				log.text.String(), "the log's keys as they were")
		})
	}
}

// TestRestartToldKeepsItsKeys: a restart's record keeps its keys (source,
// restart, cause) and reads as one sentence naming the host, the offset
// and why in a few words, not the chain of causes.
func TestRestartToldKeepsItsKeys(t *testing.T) {
	re := &datasource.RestartError{URL: "http://127.0.0.1:8080/disk.img", Offset: 2 << 20,
		Reason: "GET http://127.0.0.1:8080/disk.img: reading body after 2097152 bytes: connection reset by peer, and the server gave no ETag or Last-Modified to resume safely",
		Why:    "the server gave no ETag or Last-Modified to resume safely"}
	var log noticeLog
	log.logger().Warn("Transfer cannot resume; starting the import over from the beginning", re.Told(1, "http://127.0.0.1:8080/disk.img"))
	assert.Regexp(t, `level=WARN msg="Transfer cannot resume; starting the import over from the beginning" source=http://127\.0\.0\.1:8080/disk\.img restart=1 cause="GET http://127\.0\.0\.1:8080/disk\.img: cannot resume at byte 2097152: GET `, log.text.String())
	told, ok := re.Told(1, "x").Value.Any().(retry.Told)
	require.True(t, ok)
	assert.Equal(t, "127.0.0.1:8080 cannot resume at 2.0 MiB: the server gave no ETag or Last-Modified to resume safely; starting over from the beginning (restart 1)", told.Sentence())
}

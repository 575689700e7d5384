package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// dropOnceServer serves data with byte ranges and an ETag, paced at 32
// KiB every delay; the first request's connection is reset after dropAt
// bytes of its body, every later request is served whole.
func dropOnceServer(t *testing.T, data []byte, delay time.Duration, dropAt int) *httptest.Server {
	t.Helper()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"disk-v1"`)
		pw := &pacedWriter{ResponseWriter: w, delay: delay, left: -1, r: r}
		if r.Method == http.MethodGet && requests.Add(1) == 1 {
			pw.left = dropAt
		}
		http.ServeContent(pw, r, "", time.Time{}, bytes.NewReader(data))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// pacedWriter writes a body a chunk every delay; with left >= 0 it resets
// the connection once left bytes went out.
type pacedWriter struct {
	http.ResponseWriter
	delay time.Duration
	left  int
	r     *http.Request
}

func (p *pacedWriter) Write(b []byte) (int, error) {
	if p.left >= 0 && len(b) >= p.left {
		p.ResponseWriter.Write(b[:p.left])
		p.ResponseWriter.(http.Flusher).Flush()
		if conn, _, err := p.ResponseWriter.(http.Hijacker).Hijack(); err == nil {
			conn.(*net.TCPConn).SetLinger(0) // a reset, as a dying proxy sends
			conn.Close()
		}
		return 0, http.ErrAbortHandler
	}
	n, err := p.ResponseWriter.Write(b)
	p.ResponseWriter.(http.Flusher).Flush()
	if p.left >= 0 {
		p.left -= n
	}
	select {
	case <-p.r.Context().Done():
		return n, p.r.Context().Err()
	case <-time.After(p.delay):
	}
	return n, err
}

// retrySentence is how a dropped connection's retry reads on a terminal.
var retrySentence = regexp.MustCompile(`Connection to 127\.0\.0\.1:[0-9]+ dropped at [0-9.]+ [KM]iB; retrying in [0-9.]+ s \(retry 1 of 10\)`)

// TestTerminalTellsARetryInASentence: on a terminal a dropped connection's
// retry is one plain sentence printed above the bar ("Connection to
// 127.0.0.1:PORT dropped at 1.0 MiB; retrying in 0.9 s (retry 1 of 10)"),
// not a WARN record, the bar goes on below it and the target equals the
// source; off a terminal, and with -v on one, the record stays structured.
// Before, the terminal showed 'level=WARN msg="HTTP transfer failed,
// retrying" url=… retry=1 maxRetries=10 …' wrapped over four lines
// (checked).
func TestTerminalTellsARetryInASentence(t *testing.T) {
	dir, bin := builtImporter(t, "tmux")
	// 4 MiB at 1 MiB/s, cut after 768 KiB: inside the first answer's
	// chunk (datasource.NearChunkSize), which is all of it the import reads.
	data := bytes.Repeat([]byte("dsk\x00"), 4<<20/4)
	data[3<<20] = 1 // not all one pattern: a resumed offset error shows
	sum := sha256.Sum256(data)
	want := hex.EncodeToString(sum[:])

	srv := dropOnceServer(t, data, 31*time.Millisecond, 3<<18)
	dest := filepath.Join(dir, "disk.img")
	pane := startTmuxSized(t, 120, 30, fmt.Sprintf("%s %s/disk.img %s; echo EXIT=$?; sleep 60", bin, srv.URL, dest))
	end := pane.waitFor("EXIT=", time.Minute)
	t.Logf("at the end:\n%s", end)
	assert.Contains(t, end, "EXIT=0")
	assert.Regexp(t, retrySentence, end)
	assert.NotContains(t, end, "level=WARN")
	assertLinesFit(t, end, 120)
	lines := screenLines(end)
	for i, l := range lines {
		if retrySentence.MatchString(l) {
			require.Greater(t, len(lines), i+1)
			assert.Regexp(t, `^Connection`, l, "the sentence is a line of its own")
			assert.Regexp(t, `^Done +\[=+\] +100\.0%`, lines[i+1], "the bar below the sentence, whole")
		}
	}
	assert.Equal(t, want, testimg.Digest(t, dest, -1))

	// With -v on the terminal the record stays structured.
	srv = dropOnceServer(t, data, 0, 3<<18)
	dest = filepath.Join(dir, "verbose.img")
	pane = startTmuxSized(t, 200, 40, fmt.Sprintf("%s -v %s/disk.img %s; echo EXIT=$?; sleep 60", bin, srv.URL, dest))
	end = pane.waitFor("EXIT=", time.Minute)
	assert.Contains(t, end, "EXIT=0")
	assert.Regexp(t, `level=WARN msg="HTTP (range read|transfer) failed, retrying" url=`+srv.URL+`/disk.img retry=1 maxRetries=10 `, end)
	assert.NotRegexp(t, retrySentence, end)
	assert.Equal(t, want, testimg.Digest(t, dest, -1))

	// Off a terminal: the structured record.
	srv = dropOnceServer(t, data, 0, 3<<18)
	dest = filepath.Join(dir, "offterminal.img")
	code, _, stderr := runCLI(t, nil, env(nil), srv.URL+"/disk.img", dest)
	require.Equal(t, cdi.ExitOK, code)
	assert.Regexp(t, `level=WARN msg="HTTP (range read|transfer) failed, retrying" url=`+srv.URL+`/disk.img retry=1 maxRetries=10 `, stderr)
	assert.False(t, retrySentence.MatchString(stderr), "no sentence off a terminal")
	assert.True(t, strings.HasPrefix(strings.TrimSpace(stderr), "time="), stderr)
	assert.Equal(t, want, testimg.Digest(t, dest, -1))
}

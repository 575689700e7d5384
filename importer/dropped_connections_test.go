package importer_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// cutAfter writes at most left bytes of an answer, then closes the
// connection under it.
type cutAfter struct {
	countingWriter
	conn net.Conn
	left int
}

func (w *cutAfter) Write(p []byte) (int, error) {
	if w.left <= 0 {
		w.conn.Close()
		return 0, net.ErrClosed
	}
	n, err := w.countingWriter.Write(p[:min(len(p), w.left)])
	w.left -= n
	return n, err
}

// TestImportFromAServerThatDropsItsFirstConnectionsResumes: a server that
// cuts its first two connections (at accept, or after 512 KiB of an
// answer: inside any range the import asks for, NearChunkSize on 127.0.0.1)
// costs the import a resume, not a download over again: the object is
// served about once and lands byte for byte. (Issue 39 saw one run under
// load serve it 7 times; 16 runs here beside six busy loops served it
// 1.03-1.09 times.)
func TestImportFromAServerThatDropsItsFirstConnectionsResumes(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 64<<20, 5)
	data, err := os.ReadFile(raw)
	require.NoError(t, err)
	for _, c := range []struct {
		name     string
		atAccept bool
	}{{"cut at accept", true}, {"cut after 512 KiB", false}} {
		t.Run(c.name, func(t *testing.T) {
			var served, conns atomic.Int64
			type doomed struct{}
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var out http.ResponseWriter = countingWriter{w, &served}
				if conn, ok := r.Context().Value(doomed{}).(net.Conn); ok {
					out = &cutAfter{countingWriter{w, &served}, conn, 512 << 10}
				}
				http.ServeContent(out, r, "disk.raw", time.Unix(1.7e9, 0), bytes.NewReader(data))
			}))
			srv.Config.ConnContext = func(ctx context.Context, conn net.Conn) context.Context {
				if conns.Add(1) > 2 {
					return ctx
				}
				if c.atAccept {
					conn.Close()
					return ctx
				}
				return context.WithValue(ctx, doomed{}, conn)
			}
			srv.Start()
			t.Cleanup(srv.Close)
			o := importer.Options{Source: srv.URL + "/disk.raw", Target: filepath.Join(t.TempDir(), "disk.img"), Logger: testimg.Logger(t)}
			o.RetryBackoff = 5 * time.Millisecond
			res, err := importer.Import(context.Background(), o)
			require.NoError(t, err)
			expectImage(t, raw, o.Target, false)
			assert.GreaterOrEqual(t, res.Retries, 1, "a connection was cut")
			assert.Less(t, float64(served.Load())/float64(len(data)), 1.5, "the object was served over again, not resumed")
		})
	}
}

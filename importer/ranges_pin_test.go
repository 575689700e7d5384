package importer_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/farmirror"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// ifRangeIgnoringServer serves an object and its byte ranges itself and
// ignores If-Range, as careless servers and caches do: a range of a
// replaced object comes back as 206, and only the validators on each
// answer tell the two versions apart.
type ifRangeIgnoringServer struct {
	mu       sync.Mutex
	versions [2][]byte
	cur      int
	// replaceFrom: the object becomes versions[1] at the first range
	// request that starts here or beyond.
	replaceFrom int64
	// validators sets an answer's validators for version v; ranged says
	// the answer is to a range request.
	validators func(h http.Header, v int, ranged bool)
	// gzipRanges: 206 bodies are gzip-encoded, with Content-Encoding.
	gzipRanges bool
	ranges     atomic.Int64
}

func (s *ifRangeIgnoringServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rg := r.Header.Get("Range")
	var start, end int64 = 0, -1
	if rg != "" {
		s.ranges.Add(1)
		if n, _ := fmt.Sscanf(rg, "bytes=%d-%d", &start, &end); n == 0 {
			http.Error(w, "bad range", http.StatusBadRequest)
			return
		}
	}
	s.mu.Lock()
	if rg != "" && start >= s.replaceFrom {
		s.cur = 1
	}
	v := s.cur
	data := s.versions[v]
	s.mu.Unlock()
	h := w.Header()
	h.Set("Accept-Ranges", "bytes")
	s.validators(h, v, rg != "")
	if rg == "" {
		h.Set("Content-Length", strconv.Itoa(len(data)))
		_, _ = w.Write(data)
		return
	}
	if end < 0 || end >= int64(len(data)) {
		end = int64(len(data)) - 1
	}
	part := data[start : end+1]
	h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, end, len(data)))
	if s.gzipRanges {
		var enc bytes.Buffer
		zw := gzip.NewWriter(&enc)
		_, _ = zw.Write(part)
		_ = zw.Close()
		h.Set("Content-Encoding", "gzip")
		w.WriteHeader(http.StatusPartialContent)
		_, _ = w.Write(enc.Bytes())
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(part)))
	w.WriteHeader(http.StatusPartialContent)
	_, _ = w.Write(part)
}

func lastModified(v int) string {
	return time.Unix(1.7e9+int64(v)*3600, 0).UTC().Format(http.TimeFormat)
}

// TestParallelRangesNeverMixVersionsOfAnIfRangeIgnoringServer: an object
// replaced mid-import by one of the same size, on a server that ignores
// If-Range, lands as one version whole (the import starts over, or reads
// the first answer alone), whatever validators the server pins it by; a
// server with no validator to check is read over one connection, and a
// range answered with an encoding never asked for is not written. Before
// the check of each 206 against the first answer's validators, the first
// four cases completed with MiBs of both versions.
func TestParallelRangesNeverMixVersionsOfAnIfRangeIgnoringServer(t *testing.T) {
	dir := t.TempDir()
	aRaw := testimg.Raw(t, dir, "a.raw", 24<<20, 41)
	bRaw := testimg.Raw(t, dir, "b.raw", 24<<20, 42)
	aData, err := os.ReadFile(aRaw)
	require.NoError(t, err)
	bData, err := os.ReadFile(bRaw)
	require.NoError(t, err)
	afterTheFirstAnswer := int64(8 * datasource.DefaultChunkSize) // as in TestParallelRangesObjectReplacedMidImport
	for _, c := range []struct {
		name        string
		validators  func(h http.Header, v int, ranged bool)
		gzipRanges  bool
		replaceFrom int64
		want        []string // the versions the target may equal
		noRanges    bool     // the object must be read over one connection
	}{
		{"Last-Modified only", func(h http.Header, v int, _ bool) {
			h.Set("Last-Modified", lastModified(v))
		}, false, afterTheFirstAnswer, []string{aRaw, bRaw}, false},
		{"a weak ETag and Last-Modified", func(h http.Header, v int, _ bool) {
			h.Set("ETag", fmt.Sprintf(`W/"v%d"`, v))
			h.Set("Last-Modified", lastModified(v))
		}, false, afterTheFirstAnswer, []string{aRaw, bRaw}, false},
		{"a weak ETag that changes within one Last-Modified second", func(h http.Header, v int, _ bool) {
			h.Set("ETag", fmt.Sprintf(`W/"v%d"`, v))
			h.Set("Last-Modified", lastModified(0))
		}, false, afterTheFirstAnswer, []string{aRaw, bRaw}, false},
		{"a strong ETag on the first answer, none on its ranges", func(h http.Header, v int, ranged bool) {
			if !ranged {
				h.Set("ETag", fmt.Sprintf(`"v%d"`, v))
			}
		}, false, afterTheFirstAnswer, []string{aRaw}, false},
		{"a weak ETag alone", func(h http.Header, v int, _ bool) {
			h.Set("ETag", fmt.Sprintf(`W/"v%d"`, v))
		}, false, 0, []string{aRaw}, true},
		{"ranges gzip-encoded unasked", func(h http.Header, v int, _ bool) {
			h.Set("ETag", fmt.Sprintf(`"v%d"`, v))
		}, true, math.MaxInt64, []string{aRaw}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			obj := &ifRangeIgnoringServer{versions: [2][]byte{aData, bData}, replaceFrom: c.replaceFrom,
				validators: c.validators, gzipRanges: c.gzipRanges}
			s, err := farmirror.Start(obj, farmirror.Options{Rate: 64 << 20})
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			o := importer.Options{
				Source: s.URL + "/disk.raw", Target: filepath.Join(t.TempDir(), "disk.img"),
				Logger: testimg.Logger(t), Access: datasource.Access{Connections: 4, RetryBackoff: time.Millisecond},
			}
			res, err := importer.Import(context.Background(), o)
			require.NoError(t, err)
			assert.True(t, res.Complete)
			got := testimg.Digest(t, o.Target, -1)
			var names []string
			match := false
			for _, w := range c.want {
				names = append(names, filepath.Base(w))
				match = match || got == testimg.Digest(t, w, -1)
			}
			assert.True(t, match, "the target is none of %v whole: two versions were mixed", names)
			if c.noRanges {
				assert.Zero(t, obj.ranges.Load(), "an object with no validator to check was read over ranges")
			}
		})
	}
}

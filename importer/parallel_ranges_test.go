package importer_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/farmirror"
	"github.com/diskimport/engine/internal/testimg"
)

// replaceable serves one file's bytes with an ETag; replace swaps both.
type replaceable struct {
	mu     sync.Mutex
	data   []byte
	etag   string
	ranges atomic.Int64
	// afterRanges, when set, is called once, at the first range request
	// starting at or beyond from.
	from        int64
	afterRanges func()
	once        sync.Once
}

func (s *replaceable) replace(data []byte, etag string) {
	s.mu.Lock()
	s.data, s.etag = data, etag
	s.mu.Unlock()
}

func (s *replaceable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rg := r.Header.Get("Range"); rg != "" {
		s.ranges.Add(1)
		var start int64
		if _, err := fmt.Sscanf(rg, "bytes=%d-", &start); err == nil && start >= s.from && s.afterRanges != nil {
			s.once.Do(s.afterRanges)
		}
	}
	s.mu.Lock()
	data, etag := s.data, s.etag
	s.mu.Unlock()
	w.Header().Set("ETag", etag)
	http.ServeContent(w, r, "disk", time.Unix(1.7e9, 0), bytes.NewReader(data))
}

// TestParallelRangesImportByteForByte: raw, raw.zst and qcow2 (decoded as
// a stream) over a far mirror that paces each connection, read over
// several connections, land byte for byte.
func TestParallelRangesImportByteForByte(t *testing.T) {
	testimg.Need(t, "qemu-img", "zstd")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 32<<20, 7)
	files := map[string]string{
		"raw":     raw,
		"raw.zst": testimg.Compress(t, raw, "zst"),
		"qcow2":   testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2"),
	}
	for _, name := range []string{"raw", "raw.zst", "qcow2"} {
		for _, conns := range []int{3, 8} {
			t.Run(name, func(t *testing.T) {
				data, err := os.ReadFile(files[name])
				require.NoError(t, err)
				obj := &replaceable{data: data, etag: `"v1"`}
				s, err := farmirror.Start(obj, farmirror.Options{Rate: 64 << 20, FirstByte: 5 * time.Millisecond})
				require.NoError(t, err)
				t.Cleanup(func() { s.Close() })
				o := importer.Options{
					Source: s.URL + "/disk." + name, Target: filepath.Join(t.TempDir(), "disk.img"),
					TargetOptions: importer.TargetOptions{
						ScratchDir: t.TempDir(),
					}, Logger: testimg.Logger(t), Access: datasource.Access{
						Connections: conns,
					},
				}
				res, err := importer.Import(context.Background(), o)
				require.NoError(t, err)
				expectImage(t, raw, o.Target, false)
				assert.False(t, res.ScratchUsed)
				assert.NotContains(t, res.Phases, importer.PhaseConvert, "decoded as a stream")
				chunks := (int64(len(data)) + 4<<20 - 1) / (4 << 20)
				assert.GreaterOrEqual(t, obj.ranges.Load(), chunks-1, "every chunk after the first by a range request")
				// A worker may reuse another's idle keep-alive connection.
				assert.GreaterOrEqual(t, s.Connections.Load(), int64(2), "range requests on connections of their own")
				assert.Equal(t, 0, res.Retries)
			})
		}
	}
}

// TestParallelRangesObjectReplacedMidImport: an object replaced while its
// chunks are read is never mixed with the new one. Replaced while the
// first response (the old object) is still being read, it is read to its
// end alone; replaced after the reader left it, the import starts over and
// lands the new object whole.
func TestParallelRangesObjectReplacedMidImport(t *testing.T) {
	dir := t.TempDir()
	oldRaw := testimg.Raw(t, dir, "old.raw", 24<<20, 1)
	newRaw := testimg.Raw(t, dir, "new.raw", 24<<20, 2)
	oldData, err := os.ReadFile(oldRaw)
	require.NoError(t, err)
	newData, err := os.ReadFile(newRaw)
	require.NoError(t, err)
	for _, c := range []struct {
		name      string
		from      int64 // the object is replaced at the first range request from here
		want      string
		restarted bool
	}{
		{"before the first range", 0, oldRaw, false},
		// Over 4 connections a chunk k takes its buffer only once the
		// reader finished chunk k-4, and a connection asks for its next
		// chunk once its chunk is in: chunk 8 is asked for after the
		// reader left the first response (chunk 0). Replaced earlier, the
		// first response, still the old object, may be read to its end
		// alone, which is the first case.
		{"after ranges were read", 8 * datasource.DefaultChunkSize, newRaw, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			obj := &replaceable{data: oldData, etag: `"old"`, from: c.from}
			obj.afterRanges = func() { obj.replace(newData, `"new"`) }
			s, err := farmirror.Start(obj, farmirror.Options{Rate: 64 << 20})
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			o := importer.Options{
				Source: s.URL + "/disk.raw", Target: filepath.Join(t.TempDir(), "disk.img"),
				Logger: testimg.Logger(t), Access: datasource.Access{
					Connections:  4,
					RetryBackoff: time.Millisecond,
				},
			}
			res, err := importer.Import(context.Background(), o)
			require.NoError(t, err)
			expectImage(t, c.want, o.Target, false)
			if c.restarted {
				assert.GreaterOrEqual(t, res.Retries, 1, "the restart spent a retry")
			}
		})
	}
}

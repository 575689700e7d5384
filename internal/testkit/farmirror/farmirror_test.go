package farmirror_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testkit/farmirror"
)

// TestPacedMirrorServesWholeObjectsAndRanges: a shaped server still
// answers like the file server behind it, whole and by range, and counts
// its connections and requests.
func TestPacedMirrorServesWholeObjectsAndRanges(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "obj", time.Unix(1e9, 0), bytes.NewReader(data))
	})
	s, err := farmirror.Start(h, farmirror.Options{Rate: 64 << 20, FirstByte: time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.True(t, strings.HasPrefix(s.URL, "http://127.0.0.1:"))

	resp, err := http.Get(s.URL + "/obj")
	require.NoError(t, err)
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, data, got)

	req, _ := http.NewRequest(http.MethodGet, s.URL+"/obj", nil)
	req.Header.Set("Range", "bytes=1000-99999")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	got, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusPartialContent, resp.StatusCode)
	assert.Equal(t, data[1000:100000], got)
	assert.Equal(t, int64(2), s.Requests.Load())
	assert.GreaterOrEqual(t, s.Connections.Load(), int64(1))
}

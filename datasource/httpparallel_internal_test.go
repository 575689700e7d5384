package datasource

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParallelRangesHoldAtMostConnectionsChunks: however slowly the reader
// reads, the chunk buffers never exceed Connections × ChunkSize bytes.
func TestParallelRangesHoldAtMostConnectionsChunks(t *testing.T) {
	const conns, chunk = 3, 64 << 10
	data := make([]byte, 2<<20+999)
	_, _ = rand.Read(data)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"x"`)
		http.ServeContent(w, r, "d", time.Unix(1.7e9, 0), bytes.NewReader(data))
	}))
	t.Cleanup(srv.Close)
	src, err := NewHTTP(srv.URL, Config{Access: Access{Connections: conns}, ChunkSize: chunk})
	require.NoError(t, err)
	st, err := src.Open(context.Background())
	require.NoError(t, err)
	defer st.Body.Close()
	p, ok := st.Body.(*parallelBody)
	require.True(t, ok, "read over parallel ranges")
	var out bytes.Buffer
	buf := make([]byte, 4<<10)
	for {
		n, err := p.Read(buf)
		out.Write(buf[:n])
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if out.Len() < 8*chunk {
			time.Sleep(time.Millisecond) // the workers run ahead meanwhile
		}
		assert.LessOrEqual(t, p.buffered.Load(), int64(conns*chunk))
	}
	assert.Equal(t, data, out.Bytes())
	assert.LessOrEqual(t, p.peak.Load(), int64(conns*chunk))
	assert.GreaterOrEqual(t, p.peak.Load(), int64(chunk), "chunks were buffered")
}

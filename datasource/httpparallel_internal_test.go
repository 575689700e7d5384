package datasource

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testkit/bubblenet"
)

// TestParallelRangesHoldAtMostConnectionsChunks: however slowly the reader
// reads, the chunk buffers never exceed Connections × ChunkSize bytes. In a
// bubble, synctest.Wait lets the workers run as far ahead as they can
// before each check, the worst case, on any machine.
func TestParallelRangesHoldAtMostConnectionsChunks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const conns, chunk = 3, 64 << 10
		data := make([]byte, 2<<20+999)
		_, _ = rand.Read(data)
		p := openParallel(t, data, conns, chunk, nil)
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
				synctest.Wait() // the workers run ahead meanwhile
			}
			assert.LessOrEqual(t, p.bufs.Allocated(), int64(conns*chunk))
		}
		assert.Equal(t, data, out.Bytes())
		assert.LessOrEqual(t, p.bufs.Allocated(), int64(conns*chunk))
		assert.GreaterOrEqual(t, p.bufs.Allocated(), int64(chunk), "chunks were buffered")
	})
}

// TestParallelRangesAskBeforeTheirTurn: while the reader holds back, each
// connection has already sent its next chunk's request (its first-byte
// delay passes meanwhile), yet no more than Connections chunks are held.
// In a bubble, synctest.Wait returns once every connection's worker is
// blocked, so "no more" is checked when nothing more can come, not after a
// guessed pause.
func TestParallelRangesAskBeforeTheirTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const conns, chunk = 3, 64 << 10
		data := make([]byte, 16*chunk+777)
		_, _ = rand.Read(data)
		var ranges atomic.Int64
		p := openParallel(t, data, conns, chunk, func(r *http.Request) {
			if r.Header.Get("Range") != "" {
				ranges.Add(1)
			}
		})
		head := make([]byte, chunk)
		_, err := io.ReadFull(p, head)
		require.NoError(t, err)
		// Chunks 1-3 have their turns; chunks 4-6 are asked for and wait.
		synctest.Wait()
		assert.Equal(t, int64(2*conns), ranges.Load(), "one request waiting per connection, no more")
		assert.LessOrEqual(t, p.bufs.Allocated(), int64(conns*chunk))
		rest, err := io.ReadAll(p)
		require.NoError(t, err)
		assert.Equal(t, data, append(head, rest...))
		assert.LessOrEqual(t, p.bufs.Allocated(), int64(conns*chunk))
	})
}

// openParallel serves data with an ETag (seen calls seen with each request
// when not nil) over the in-memory network of the caller's synctest
// bubble, and opens it over conns connections of chunk-byte chunks.
func openParallel(t *testing.T, data []byte, conns int, chunk int64, seen func(*http.Request)) *parallelBody {
	t.Helper()
	tr := bubblenet.HTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if seen != nil {
			seen(r)
		}
		w.Header().Set("ETag", `"x"`)
		http.ServeContent(w, r, "d", time.Unix(1.7e9, 0), bytes.NewReader(data))
	}))
	src, err := NewHTTP(bubblenet.URL, Config{Transport: tr, Access: Access{Connections: conns}, ChunkSize: chunk})
	require.NoError(t, err)
	st, err := src.Open(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { st.Body.Close() })
	p, ok := st.Body.(*parallelBody)
	require.True(t, ok, "read over parallel ranges")
	return p
}

// TestChunkPlanCutsTheLastRoundPerConnection: whole rounds of chunks, then
// the rest in one piece per connection (none below minTailPiece), the spans
// contiguous and covering the object exactly.
func TestChunkPlanCutsTheLastRoundPerConnection(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		size, chunk       int64
		conns             int
		whole, piece, cnt int64
	}{
		{96 * mib, 4 * mib, 8, 24, 4 * mib, 24},
		{96 * mib, 4 * mib, 16, 16, 2 * mib, 32},
		{96 * mib, 4 * mib, 12, 24, 4 * mib, 24},
		{36 * mib, 4 * mib, 8, 8, mib / 2, 16},
		{32*mib + 1, 4 * mib, 8, 8, 1, 9},
		{5 * mib, 4 * mib, 8, 1, 256 << 10, 5},
		{3<<20 + 12345, 256 << 10, 4, 12, 12345, 13},
		{2<<20 + 999, 64 << 10, 3, 30, 44024, 33},
	} {
		p := newChunkPlan(c.size, c.chunk, c.conns)
		assert.Equal(t, c.whole, p.whole, "%+v whole", c)
		assert.Equal(t, c.piece, p.piece, "%+v piece", c)
		assert.Equal(t, c.cnt, p.count, "%+v count", c)
		var at int64
		for k := range p.count {
			off, n := p.span(k)
			assert.Equal(t, at, off, "%+v chunk %d", c, k)
			assert.Positive(t, n)
			assert.LessOrEqual(t, n, c.chunk)
			at += n
		}
		assert.Equal(t, c.size, at, "%+v covered", c)
	}
}

package datasource

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

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

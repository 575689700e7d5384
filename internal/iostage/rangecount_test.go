package iostage

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Reads that overlap, repeat, touch end to end or arrive out of order count
// each byte of the source once, and a head read from the start counts with
// them; the wire count keeps every byte received.
func TestRangeCounterCountsEachSourceByteOnce(t *testing.T) {
	var c RangeCounter
	for _, r := range [][2]int64{{0, 512}, {0, 512}, {4096, 4096}, {1024, 1024}, {2048, 2048}, {8192, 0}, {100, 2000}, {1 << 20, 65536}, {1<<20 + 32768, 65536}} {
		c.Add(r[0], r[1])
	}
	assert.EqualValues(t, 8192+65536+32768, c.Distinct(0))
	assert.EqualValues(t, 8192+65536+32768, c.Distinct(4096), "a head inside what the reads covered")
	assert.EqualValues(t, 2<<20, c.Distinct(2<<20), "a head covering every read")
	assert.EqualValues(t, 512+512+4096+1024+2048+2000+2*65536, c.Wire())
	assert.Len(t, c.runs, 2)
}

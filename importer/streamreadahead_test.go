package importer

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestStreamReadAheadNeedsASecondCPU: an uncompressed stream is read ahead
// on a goroutine of its own only when another CPU can run it (Workers 2 or
// more; not under CDI's 750m, Workers 1), and not when the source already
// reads ahead with no checksum on the way, nor under a decompressor
// (format.Open reads ahead there).
func TestStreamReadAheadNeedsASecondCPU(t *testing.T) {
	for _, tc := range []struct {
		name                                      string
		compressed, sourceReadsAhead, checksummed bool
		workers                                   int
		want                                      bool
	}{
		{"one GET, two CPUs", false, false, false, 2, true},
		{"one GET, one CPU (750m)", false, false, false, 1, false},
		{"one GET, checksummed, one CPU", false, false, true, 1, false},
		{"sixteen connections", false, true, false, 2, false},
		{"sixteen connections, checksummed", false, true, true, 2, true},
		{"compressed", true, false, false, 2, false},
	} {
		assert.Equal(t, tc.want, readStreamAhead(tc.compressed, tc.sourceReadsAhead, tc.checksummed, tc.workers), tc.name)
	}
}

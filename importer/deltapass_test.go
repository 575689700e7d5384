package importer

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/delta"
)

// TestDeltaPassReportsThePassAsItWas: the public report of a pass has
// every number of the machinery's, and the same JSON, byte for byte (the
// command line's "delta" object, and clone-source's, which prints the
// sender's pass).
func TestDeltaPassReportsThePassAsItWas(t *testing.T) {
	p := &delta.Pass{
		Stats:      delta.Stats{Size: 1 << 30, Blocks: 16384, BlocksChanged: 3, DataBytes: 2 << 16, ZeroBytes: 1 << 16},
		BaseDigest: "blk-sha256:aa", Digest: "blk-sha256:bb", Final: true, Full: true, Received: true,
		WireBytes: 12345, SignatureBytes: 678, Resumes: 2, Duration: time.Second,
	}
	want, err := json.Marshal(p)
	require.NoError(t, err)
	got, err := json.Marshal(deltaPassOf(p))
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got))
	assert.Equal(t, p.Duration, deltaPassOf(p).Duration)
}

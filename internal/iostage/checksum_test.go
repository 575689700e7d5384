package iostage_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/iostage"
)

// The digest covers the first n bytes only; a reader shorter than n is a
// target too small, not a digest of fewer bytes.
func TestSHA256PrefixHashesExactlyNBytes(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 300000) // 3 MB: several copy buffers
	sum := sha256.Sum256(data[:2500001])
	got, err := iostage.SHA256Prefix(bytes.NewReader(data), 2500001)
	require.NoError(t, err)
	assert.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), got)
	_, err = iostage.SHA256Prefix(bytes.NewReader(data[:100]), 101)
	assert.ErrorIs(t, err, errdefs.ErrTargetTooSmall)
}

package importer_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testimg"
)

// TestRetryAfterKillReclaimsPartialFile: an import SIGKILLed on a file
// volume leaves .disk.img.partial-NNN. Without reclaiming it the retry has
// no room (the volume is 16 MiB, the leftover 10 MiB, the image 8 MiB);
// with it the retry imports the image whole, and the volume's other files
// stay.
func TestRetryAfterKillReclaimsPartialFile(t *testing.T) {
	const mib = 1 << 20
	vol := testimg.Tmpfs(t, 16*mib)
	leftover := filepath.Join(vol, ".disk.img.partial-1804289383")
	require.NoError(t, os.WriteFile(leftover, bytes.Repeat([]byte{0xEE}, 10*mib), 0o660))
	unrelated := filepath.Join(vol, ".disk.img.partial-notours")
	require.NoError(t, os.WriteFile(unrelated, []byte("keep me"), 0o644))

	raw := testimg.Raw(t, t.TempDir(), "disk.raw", 8*mib, 51)
	res, err := importer.Import(context.Background(), importer.Options{Source: raw, Target: vol, Logger: testLogger(t)})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(vol, "disk.img"), res.Target)
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, res.Target, -1))
	_, err = os.Stat(leftover)
	assert.True(t, os.IsNotExist(err), "the leftover partial file is still there")
	b, err := os.ReadFile(unrelated)
	require.NoError(t, err)
	assert.Equal(t, "keep me", string(b))
}

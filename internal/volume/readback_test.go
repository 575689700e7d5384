//go:build linux

package volume_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/iostage"
	"github.com/diskimport/engine/internal/volume"
)

// A file read back gives the digest of its first n bytes, as they are on
// storage; a cancelled context stops the read.
func TestReadBackSHA256(t *testing.T) {
	img := makeImage(9, 6*mib, 0.3)
	path := filepath.Join(t.TempDir(), "disk.img")
	require.NoError(t, os.WriteFile(path, img, 0o600))
	n := int64(5*mib + 123)
	got, err := volume.ReadBackSHA256(context.Background(), path, n)
	require.NoError(t, err)
	want, err := iostage.SHA256Prefix(bytes.NewReader(img), n)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = volume.ReadBackSHA256(ctx, path, n)
	assert.Error(t, err)
}

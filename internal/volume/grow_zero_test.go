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

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/volume"
)

func TestGrowFileNeverShrinks(t *testing.T) {
	p := filepath.Join(t.TempDir(), "disk.img")
	require.NoError(t, os.WriteFile(p, bytes.Repeat([]byte{1}, 3*mib), 0o644))
	require.NoError(t, volume.GrowFile(p, 1*mib, false))
	st, err := os.Stat(p)
	require.NoError(t, err)
	assert.EqualValues(t, 3*mib, st.Size(), "shrunk")
	require.NoError(t, volume.GrowFile(p, 8*mib, true))
	st, err = os.Stat(p)
	require.NoError(t, err)
	assert.EqualValues(t, 8*mib, st.Size())
}

func TestZeroAllZeroesADeviceAndRefusesAFile(t *testing.T) {
	needRoot(t)
	dev := newLoop(t, 4*mib, fillRandom(7))
	tgt, err := volume.Open(context.Background(), volume.Options{Path: dev})
	require.NoError(t, err)
	defer tgt.Close()
	require.NoError(t, tgt.ZeroAll(context.Background(), true))
	assert.Equal(t, make([]byte, 4*mib), readDev(t, dev, 0, 4*mib))

	file, err := volume.Open(context.Background(), volume.Options{Path: filepath.Join(t.TempDir(), "disk.img"), RequestedSize: mib})
	require.NoError(t, err)
	defer file.Close()
	assert.ErrorIs(t, file.ZeroAll(context.Background(), true), errdefs.ErrInvalidOptions)
}

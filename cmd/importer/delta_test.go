package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/cdi"
	"github.com/diskimport/engine/internal/testimg"
)

func TestCLIDeltaPassReportsWhatItSent(t *testing.T) {
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "src.raw", 4<<20, 51)
	dest := filepath.Join(dir, "dest.img")
	code, stdout, _ := runCLI(t, nil, env(nil), "--delta", "--json", src, dest)
	require.Equal(t, cdi.ExitOK, code)
	first := decode(t, []byte(stdout))
	assert.Nil(t, first.Delta, "no base: a full clone")

	f, err := os.OpenFile(src, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("changed"), 3<<20)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	code, stdout, stderr := runCLI(t, nil, env(nil), "--delta", "--delta-base", first.ContentDigest, "--json", src, dest)
	require.Equal(t, cdi.ExitOK, code, stderr)
	m := decode(t, []byte(stdout))
	require.NotNil(t, m.Delta, stdout)
	assert.EqualValues(t, 1, m.Delta.BlocksChanged)
	assert.EqualValues(t, 64<<10, m.Delta.DataBytes)
	assert.True(t, m.Delta.Final)
	assert.Equal(t, first.ContentDigest, m.Delta.BaseDigest)
	assert.Equal(t, testimg.Digest(t, src, -1), testimg.Digest(t, dest, -1))

	code, _, stderr = runCLI(t, nil, env(nil), "--delta", src, dest)
	require.Equal(t, cdi.ExitOK, code)
	assert.Contains(t, stderr, "Delta pass complete: "+dest)
	assert.Contains(t, stderr, "0 of 64 blocks changed")
	assert.Contains(t, stderr, "final")
}

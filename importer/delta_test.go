package importer_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testimg"
)

func TestDeltaCloneRepeatedPassesAndFallbacks(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "src.raw", 8<<20, 41)
	dest := filepath.Join(dir, "dest.img")
	opts := importer.Options{Source: src, Target: dest, Delta: true, Logger: testimg.Logger(t)}

	// No target yet: a full clone.
	res, err := importer.Import(ctx, opts)
	require.NoError(t, err)
	assert.Nil(t, res.Delta, "no base: a full clone")
	sameBytes(t, src, dest, 8<<20)
	first := res.ContentDigest

	// Two blocks changed: a delta pass onto the last pass's base.
	f, err := os.OpenFile(src, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(testimg.RandomBytes(100, 1), 5<<20+10)
	require.NoError(t, err)
	_, err = f.WriteAt(testimg.RandomBytes(100, 2), 128<<10)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	opts.DeltaBase = first
	res, err = importer.Import(ctx, opts)
	require.NoError(t, err)
	require.NotNil(t, res.Delta)
	assert.EqualValues(t, 2, res.Delta.BlocksChanged)
	assert.EqualValues(t, 2*64<<10, res.DataBytes)
	assert.True(t, res.Delta.Final)
	assert.Equal(t, first, res.Delta.BaseDigest)
	assert.NotEqual(t, first, res.ContentDigest)
	sameBytes(t, src, dest, 8<<20)

	// The base named is not the target's (the digest of the first pass
	// again): a full clone, exact.
	res, err = importer.Import(ctx, opts)
	require.NoError(t, err)
	assert.Nil(t, res.Delta)
	sameBytes(t, src, dest, 8<<20)

	// A qcow2 source is converted, never passed as bytes.
	qcow := testimg.Convert(t, src, filepath.Join(dir, "src.qcow2"), "qcow2")
	opts.Source, opts.DeltaBase = qcow, ""
	res, err = importer.Import(ctx, opts)
	require.NoError(t, err)
	assert.Nil(t, res.Delta)
	assert.Equal(t, "qcow2", res.SourceFormat)
	sameBytes(t, src, dest, 8<<20)
}

package volume_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testimg"
	"github.com/diskimport/engine/internal/volume"
)

// A scratch file goes through the page cache with paced writeback; its
// content and holes must be the same as a direct write's, across several
// writeback windows.
func TestScratchFileContentAndHoles(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	path := filepath.Join(dir, "scratch.qcow2")
	tg, err := volume.Open(ctx, volume.Options{Path: path, Scratch: true})
	require.NoError(t, err)
	defer tg.Close()
	img := makeImage(7, 200*mib+4321, 0.5) // > 3 writeback windows
	w := writeAll(t, tg, img)
	assert.Less(t, w.DataBytes(), int64(len(img))*3/4)
	require.NoError(t, tg.Commit(ctx))
	requireFileHolds(t, path, img)
	assert.Less(t, testimg.Allocated(t, path), int64(len(img))*3/4, "zero runs must stay holes")
}

package importer_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testimg"
)

// Progress.Percent is one percentage of the whole import: it never goes
// back (not at Convert, not at Complete) and is 100 only at Complete.
func TestProgressPercentNeverGoesBack(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 33)
	xz := testimg.Compress(t, testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2"), "xz")
	var mu sync.Mutex
	var seen []importer.Progress
	_, err := importer.Import(context.Background(), importer.Options{
		Source: xz, Target: filepath.Join(t.TempDir(), "disk.img"), TargetOptions: importer.TargetOptions{
			ScratchDir: t.TempDir(),
		}, Logger: testLogger(t),
		Progress: func(p importer.Progress) { mu.Lock(); seen = append(seen, p); mu.Unlock() },
	})
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, seen)
	for i, p := range seen {
		if i > 0 {
			assert.GreaterOrEqual(t, p.Percent, seen[i-1].Percent, "%+v after %+v", p, seen[i-1])
		}
		if p.Phase != importer.PhaseComplete {
			assert.Less(t, p.Percent, 100.0, "%+v", p)
		}
	}
	last := seen[len(seen)-1]
	assert.Equal(t, importer.PhaseComplete, last.Phase)
	assert.Equal(t, 100.0, last.Percent)
}

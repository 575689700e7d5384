package importer

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/streamdecode"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// discardSink takes the decoder's guest writes and forgets them.
type discardSink struct{}

func (discardSink) WriteAt(p []byte, _ int64) (int, error) { return len(p), nil }

func qcow2Header(t *testing.T, path string) format.Header {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	head := make([]byte, 64<<10)
	n, _ := f.ReadAt(head, 0)
	h, err := format.ParseHeader(format.QCOW2, head[:n])
	require.NoError(t, err)
	return h
}

func layoutOf(t *testing.T, path string) (format.QCOW2Layout, int64) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	st, err := f.Stat()
	require.NoError(t, err)
	lay, err := format.ReadQCOW2Layout(context.Background(), f, qcow2Header(t, path), st.Size(), maxLayoutTableBytes)
	require.NoError(t, err)
	return lay, st.Size()
}

// decodes says whether the stream decoder takes the file in one pass
// holding at most maxHeld bytes.
func decodes(t *testing.T, path string, maxHeld int64) bool {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	_, err = streamdecode.DecodeQCOW2(context.Background(), f, discardSink{}, streamdecode.Options{MaxBuffered: maxHeld})
	if errors.Is(err, errdefs.ErrNotStreamable) {
		return false
	}
	require.NoError(t, err)
	return true
}

// The route rule on images qemu-img made, each with the layout the rule
// is about; where it predicts the decoder would run out of buffer, the
// real decoder is asked too.
func TestRouteRuleOnQCOW2Layouts(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 24<<20, 3)
	const maxHeld = 1 << 20

	plain := testimg.Convert(t, raw, filepath.Join(dir, "plain.qcow2"), "qcow2")
	// Compressed clusters: a third of them in this image (random data
	// stays plain), all of them in a text-only one.
	compressed := filepath.Join(dir, "c.qcow2")
	testimg.Run(t, "qemu-img", "convert", "-q", "-c", "-f", "raw", "-O", "qcow2", raw, compressed)
	text := filepath.Join(dir, "text.raw")
	require.NoError(t, os.WriteFile(text, bytes.Repeat([]byte("all work and no play makes jack a dull boy\n"), 200000), 0o644))
	allCompressed := filepath.Join(dir, "text.qcow2")
	testimg.Run(t, "qemu-img", "convert", "-q", "-c", "-f", "raw", "-O", "qcow2", text, allCompressed)
	// A file longer than what the image references: 4× its length.
	padded := testimg.Convert(t, raw, filepath.Join(dir, "padded.qcow2"), "qcow2")
	st, err := os.Stat(padded)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(padded, 4*st.Size()))
	// Growing the disk past what its L1 table covers moves the L1 to the
	// end of the file: every cluster then comes before the table that maps
	// it.
	moved := testimg.Convert(t, raw, filepath.Join(dir, "moved.qcow2"), "qcow2")
	st, err = os.Stat(moved)
	require.NoError(t, err)
	testimg.Run(t, "qemu-img", "resize", "-q", "-f", "qcow2", moved, "2G")
	require.GreaterOrEqual(t, qcow2Header(t, moved).L1TableOffset, uint64(st.Size()), "the L1 table did not move")

	for _, c := range []struct {
		name, path string
		ranged     bool
	}{
		{"plain", plain, false},
		{"compressed", compressed, false},
		{"all compressed", allCompressed, false},
		{"padded", padded, true},
		{"L1 at the end", moved, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			lay, size := layoutOf(t, c.path)
			ranged, why := rangedBetter(lay, size, maxHeld)
			assert.Equal(t, c.ranged, ranged, "layout %+v of a %d-byte file: %s", lay, size, why)
			switch c.name {
			case "compressed":
				assert.Positive(t, lay.Compressed)
				assert.Less(t, 2*lay.Compressed, lay.Clusters)
			case "all compressed":
				assert.Equal(t, lay.Clusters, lay.Compressed)
			default:
				assert.Zero(t, lay.Compressed)
			}
			if c.name != "padded" && c.name != "all compressed" {
				// Referenced is the file, give or take the refcount
				// structures qemu-img wrote.
				assert.InDelta(t, size, lay.Referenced, float64(size)/10, "layout %+v", lay)
			}
			// The prediction about the buffer is the decoder's own verdict.
			assert.Equal(t, lay.Early <= maxHeld, decodes(t, c.path, maxHeld), "layout %+v", lay)
		})
	}
	// With the default buffer the moved image streams, and the rule says so.
	lay, size := layoutOf(t, moved)
	ranged, _ := rangedBetter(lay, size, streamdecode.DefaultMaxBuffered)
	assert.False(t, ranged)
	assert.True(t, decodes(t, moved, streamdecode.DefaultMaxBuffered))
}

// A blank disk is an import with no source: its events are the machine's
// for routeBlank, and the file is there at its size, zeros throughout.
func TestBlankImportEvents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk.img")
	type seen struct {
		kind  EventKind
		phase Phase
	}
	var events []seen
	res, err := importWithRestarts(context.Background(), request{
		Target:        path,
		Blank:         true,
		TargetOptions: TargetOptions{Size: 8 << 20},
		Logger:        testimg.Logger(t),
		Events: func(e Event) {
			assert.NoError(t, e.Err, "phase %s", e.Phase)
			events = append(events, seen{e.Kind, e.Phase})
		},
	})
	require.NoError(t, err)
	assert.True(t, res.Complete)
	assert.Equal(t, []Phase{PhaseInfo, PhaseResize, PhaseCommit, PhaseComplete}, res.Phases)
	assert.Equal(t, []seen{
		{EventPhaseStarted, PhaseInfo}, {EventPhaseEnded, PhaseInfo},
		{EventPhaseStarted, PhaseResize}, {EventPhaseEnded, PhaseResize},
		{EventPhaseStarted, PhaseCommit}, {EventPhaseEnded, PhaseCommit},
		{EventPhaseStarted, PhaseComplete},
	}, events)
	assert.EqualValues(t, 8<<20, res.VirtualSize)
	assert.EqualValues(t, 8<<20, res.TargetSize)
	assert.Empty(t, res.Sandbox, "a raw blank disk runs no qemu-img")
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.EqualValues(t, 8<<20, st.Size())
	testimg.AssertZeros(t, path, 0, 8<<20)
}

// A blank import cancelled after Resize made the file leaves nothing in
// the target directory.
func TestBlankImportCancelledLeavesNoFile(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var staged []os.DirEntry
	res, err := importWithRestarts(ctx, request{
		Target:        filepath.Join(dir, "disk.img"),
		Blank:         true,
		TargetOptions: TargetOptions{Size: 8 << 20, Preallocation: true},
		Logger:        testimg.Logger(t),
		Wrap: func(p Phase, step phaseStep) phaseStep {
			if p != PhaseResize {
				return step
			}
			return func(ctx context.Context) error {
				err := step(ctx)
				staged, _ = os.ReadDir(dir)
				cancel()
				return err
			}
		},
	})
	require.ErrorIs(t, err, errdefs.ErrCancelled)
	assert.False(t, res.Complete)
	assert.False(t, res.PreallocationApplied, "the preallocated file is gone")
	assert.Equal(t, []Phase{PhaseInfo, PhaseResize, PhaseCommit, PhaseError}, res.Phases)
	require.Len(t, staged, 1, "Resize wrote the disk under a temporary name")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing left behind")
}

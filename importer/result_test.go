package importer_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// bodyCounter counts the response body bytes a handler writes.
type bodyCounter struct {
	h    http.Handler
	sent atomic.Int64
}

func (c *bodyCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.h.ServeHTTP(countingWriter{w, &c.sent}, r)
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n.Add(int64(n))
	return n, err
}

// On the ranged route BytesRead counts the range reads too, not only the
// head of the first response.
func TestRangedBytesReadCountsRangeReads(t *testing.T) {
	testimg.Need(t, "qemu-img")
	raw, www := rawAndWebRoot(t, imageSize, 31)
	qcow := testimg.Convert(t, raw, filepath.Join(www, "disk.qcow2"), "qcow2")
	st, err := os.Stat(qcow)
	require.NoError(t, err)
	bc := &bodyCounter{h: http.FileServer(http.Dir(www))}
	srv := httptest.NewServer(bc)
	t.Cleanup(srv.Close)

	var last importer.Progress
	res, err := importer.Import(context.Background(), importer.Options{
		Source: srv.URL + "/disk.qcow2", Target: filepath.Join(t.TempDir(), "disk.img"),
		Logger: testimg.Logger(t), Progress: func(p importer.Progress) { last = p },
	})
	require.NoError(t, err)
	require.False(t, res.ScratchUsed, "phases %v", res.Phases)
	// qemu-img reads every allocated cluster: most of the file came over
	// the wire, and no more than the server sent.
	assert.Greater(t, res.BytesRead, st.Size()/2, "file %d bytes", st.Size())
	assert.LessOrEqual(t, res.BytesRead, bc.sent.Load())
	assert.Equal(t, res.BytesRead, last.BytesRead, "the last progress report agrees")
}

// A failed import reports the virtual size it found, a SizeError that
// names it (What was empty for a qcow2's and a raw image's virtual size),
// and a last progress report that is not "unknown" (-1: before, an import
// that failed in Info ended its progress at -1).
func TestTooSmallReportsVirtualSize(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw, qcow := testimg.RawAndQCOW2(t, dir, 3<<20, 32)
	for name, src := range map[string]string{"raw": raw, "qcow2": qcow} {
		t.Run(name, func(t *testing.T) {
			var last importer.Progress
			res, err := importer.Import(context.Background(), importer.Options{
				Source: src, Target: filepath.Join(t.TempDir(), "disk.img"), TargetOptions: importer.TargetOptions{
					Size: 2 << 20,
				}, Logger: testimg.Logger(t), Progress: func(p importer.Progress) { last = p },
			})
			require.ErrorIs(t, err, importer.ErrTargetTooSmall)
			assert.EqualValues(t, 3<<20, res.VirtualSize)
			var se *importer.SizeError
			require.True(t, errors.As(err, &se))
			assert.NotEmpty(t, se.What, "the SizeError names the size")
			assert.Equal(t, importer.PhaseError, last.Phase)
			assert.GreaterOrEqual(t, last.Percent, 0.0, "a failed import's progress is what was done, not unknown")
		})
	}
}

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
		}, Logger: testimg.Logger(t),
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

// A qcow2 upload goes to scratch: the source is drained once Validate
// passed, and Complete is entered only after Commit ended, which is also
// the first time progress may say Complete.
func TestEventsOfAStreamedConversion(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	_, q := testimg.RawAndQCOW2(t, dir, 4<<20, 51)
	f, err := os.Open(q)
	require.NoError(t, err)
	defer f.Close()

	var mu sync.Mutex
	var log []string
	committed := false
	progressSawCompleteEarly := false
	res, err := importer.Import(context.Background(), importer.Options{
		Source: "-", SourceReader: f, Target: filepath.Join(t.TempDir(), "disk.img"), TargetOptions: importer.TargetOptions{
			ScratchDir:     t.TempDir(),
			NoStreamDecode: true,
		},
		Logger: testimg.Logger(t), // the conversion's events, not the decoder's
		Events: func(e importer.Event) {
			mu.Lock()
			defer mu.Unlock()
			log = append(log, e.Kind.String()+" "+string(e.Phase))
			if e.Kind == importer.EventPhaseEnded && e.Phase == importer.PhaseCommit && e.Err == nil {
				committed = true
			}
		},
		Progress: func(p importer.Progress) {
			mu.Lock()
			defer mu.Unlock()
			if p.Phase == importer.PhaseComplete && !committed {
				progressSawCompleteEarly = true
			}
		},
	})
	require.NoError(t, err)
	assert.True(t, res.Complete)
	assert.Equal(t, []importer.Phase{importer.PhaseInfo, importer.PhaseTransferScratch, importer.PhaseValidate,
		importer.PhaseConvert, importer.PhaseResize, importer.PhaseCommit, importer.PhaseComplete}, res.Phases)
	assert.Equal(t, []string{
		"PhaseStarted Info", "PhaseEnded Info",
		"PhaseStarted TransferScratch", "PhaseEnded TransferScratch",
		"PhaseStarted Validate", "PhaseEnded Validate", "SourceDrained Validate",
		"PhaseStarted Convert", "PhaseEnded Convert",
		"PhaseStarted Resize", "PhaseEnded Resize",
		"PhaseStarted Commit", "PhaseEnded Commit",
		"PhaseStarted Complete",
	}, log)
	assert.False(t, progressSawCompleteEarly, "progress reported Complete before Commit ended")
}

// A failing phase ends with its error, then Error is entered; the source
// is never reported drained.
func TestEventsOfAFailedImport(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 1<<20, 52)
	boom := errors.New("injected")
	var log []string
	var ended error
	o := importer.Options{
		Source: raw, Target: filepath.Join(t.TempDir(), "disk.img"), Logger: testimg.Logger(t),
		Events: func(e importer.Event) {
			log = append(log, e.Kind.String()+" "+string(e.Phase))
			if e.Kind == importer.EventPhaseEnded && e.Err != nil {
				ended = e.Err
			}
		},
	}
	_, err := importer.Import(context.Background(), importer.WithPhaseHook(o, func(p importer.Phase, step func(context.Context) error) func(context.Context) error {
		if p != importer.PhaseTransferDataFile {
			return step
		}
		return func(context.Context) error { return boom }
	}))
	require.ErrorIs(t, err, boom)
	assert.ErrorIs(t, ended, boom)
	assert.Equal(t, []string{"PhaseStarted Info", "PhaseEnded Info", "PhaseStarted TransferDataFile", "PhaseEnded TransferDataFile", "PhaseStarted Error"}, log)
}

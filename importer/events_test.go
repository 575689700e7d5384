package importer_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testimg"
)

// A qcow2 upload goes to scratch: the source is drained once Validate
// passed, and Complete is entered only after Commit ended, which is also
// the first time progress may say Complete.
func TestEventsOfAStreamedConversion(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 4<<20, 51)
	q := testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2")
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
		Logger: testLogger(t), // the conversion's events, not the decoder's
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
		Source: raw, Target: filepath.Join(t.TempDir(), "disk.img"), Logger: testLogger(t),
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

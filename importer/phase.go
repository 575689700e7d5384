package importer

import "github.com/diskimport/engine/internal/engine"

// Phase names a step of an import, as logged ("New phase: X") and listed in
// Result.Phases. An import runs Info, then the phases of its plan:
//
//	Info → (TransferScratch | TransferDataFile | TransferDataDir | TransferDelta) → Validate → Convert → Resize → Verify → Commit → Complete
//
// (each route takes the ones it needs: a delta pass Info, TransferDelta,
// Verify, Commit, Complete), or ends in Error.
type Phase = engine.Phase

// The phases. Complete is entered only once the data is durable.
const (
	PhaseInfo             = engine.Info
	PhaseTransferScratch  = engine.TransferScratch
	PhaseTransferDataFile = engine.TransferDataFile
	PhaseTransferDataDir  = engine.TransferDataDir
	PhaseTransferDelta    = engine.TransferDelta
	PhaseValidate         = engine.Validate
	PhaseConvert          = engine.Convert
	PhaseResize           = engine.Resize
	PhaseVerify           = engine.Verify
	PhaseCommit           = engine.Commit
	PhaseComplete         = engine.Complete
	PhaseError            = engine.Error
)

// Phases returns every phase, in the order an import may pass them.
func Phases() []Phase { return engine.Phases() }

// Event is what an import tells Options.Events: a phase started or ended,
// or the source was drained (every byte received and validated; what is
// left works on the target alone).
type Event struct {
	Kind EventKind
	// Phase is the phase that started or ended; for EventSourceDrained,
	// the phase after which the source was drained.
	Phase Phase
	// Err is the phase's error, for EventPhaseEnded.
	Err error
}

// EventKind says what an Event reports.
type EventKind = engine.EventKind

// The kinds of Event.
const (
	EventPhaseStarted  = engine.PhaseStarted
	EventPhaseEnded    = engine.PhaseEnded
	EventSourceDrained = engine.SourceDrained
)

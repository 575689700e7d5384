package importer

import "fmt"

// Phase names a step of an import, as logged ("New phase: X") and listed in
// Result.Phases; the values match CDI's importer where the step exists
// there (Verify and Commit are ours). An import runs Info, then the phases
// of its plan:
//
//	Info → (TransferScratch | TransferDataFile | TransferDataDir | TransferDelta) → Validate → Convert → Resize → Verify → Commit → Complete
//
// (each route takes the ones it needs: a delta pass Info, TransferDelta,
// Verify, Commit, Complete), or ends in Error.
type Phase string

// The phases. Complete is entered only once the data is durable.
const (
	// Info inspects the source and the target and decides the plan.
	PhaseInfo Phase = "Info"
	// TransferScratch copies the (decompressed) image to a scratch file
	// for qemu-img to read at random.
	PhaseTransferScratch Phase = "TransferScratch"
	// TransferDataFile streams raw data straight onto the target.
	PhaseTransferDataFile Phase = "TransferDataFile"
	// TransferDataDir extracts a tar stream into a staging directory.
	PhaseTransferDataDir Phase = "TransferDataDir"
	// TransferDelta signs the source and the target and writes the runs
	// that differ into the target, in place.
	PhaseTransferDelta Phase = "TransferDelta"
	// Validate checks the image qemu-img is about to read.
	PhaseValidate Phase = "Validate"
	// Convert writes the target with qemu-img.
	PhaseConvert Phase = "Convert"
	// Resize grows a file target to the requested size and applies
	// preallocation (for a blank disk: creates it at its size).
	PhaseResize Phase = "Resize"
	// Verify reads source and target back and compares them.
	PhaseVerify Phase = "Verify"
	// Commit makes the data durable under its final name (fsync, rename).
	PhaseCommit Phase = "Commit"
	// Complete is entered only once the data is durable; it does no work.
	PhaseComplete Phase = "Complete"
	// Error is entered after the first failure.
	PhaseError Phase = "Error"
)

// Phases returns every phase, in the order an import may pass them. It is
// the one list of the constants above (TestPhasesListsEveryDeclaredPhase
// reads their declarations): whatever enumerates phases (CDI's phase
// gauge, docs) takes it from here.
func Phases() []Phase {
	return []Phase{PhaseInfo, PhaseTransferScratch, PhaseTransferDataFile, PhaseTransferDataDir, PhaseTransferDelta, PhaseValidate, PhaseConvert,
		PhaseResize, PhaseVerify, PhaseCommit, PhaseComplete, PhaseError}
}

// EventKind says what an Event reports.
type EventKind int

// The kinds of Event.
const (
	// EventPhaseStarted: the machine entered Event.Phase (Complete and Error
	// included).
	EventPhaseStarted EventKind = iota + 1
	// EventPhaseEnded: Event.Phase returned; Event.Err is its error, if any.
	EventPhaseEnded
	// EventSourceDrained: every byte of the source has been received and
	// validated (checksums, image structure); what follows works on the
	// target alone. Event.Phase is the phase after which that held.
	EventSourceDrained
)

func (k EventKind) String() string {
	switch k {
	case EventPhaseStarted:
		return "PhaseStarted"
	case EventPhaseEnded:
		return "PhaseEnded"
	case EventSourceDrained:
		return "SourceDrained"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is what an import tells Options.Events, synchronously, from the
// goroutine running it: a phase started or ended, or the source was
// drained (every byte received and validated; what is left works on the
// target alone).
type Event struct {
	Kind EventKind
	// Phase is the phase that started or ended; for EventSourceDrained,
	// the phase after which the source was drained.
	Phase Phase
	// Err is the phase's error, for EventPhaseEnded.
	Err error
}

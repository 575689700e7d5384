package engine

import (
	"context"
	"fmt"
	"log/slog"
)

// A Step does the work of one phase.
type Step func(ctx context.Context) error

// Machine runs an import: Info decides a Plan, then the plan's phases run in
// order. It logs every phase as it is entered ("New phase: X"), tells the
// observer, and stops at the first error by entering Error. Phases do not
// pick their successor, so a phase cannot be entered twice.
type Machine struct {
	// Logger receives the phase log; nil: slog.Default().
	Logger *slog.Logger
	// Observe, when set, is called with every event, synchronously.
	Observe func(Event)
	// Wrap, when set, may decorate the step of any phase (tests inject
	// faults with it).
	Wrap func(Phase, Step) Step

	entered []Phase
}

// Run enters Info and runs info, then the steps of the plan it returned,
// ending in Complete. It returns the plan (nil when Info failed), the
// phases entered (ending in Complete, or in Error after a failure) and the
// first error.
func (m *Machine) Run(ctx context.Context, info func(context.Context) (*Plan, error), steps func(*Plan) map[Phase]Step) (*Plan, []Phase, error) {
	var plan *Plan
	err := m.run(ctx, Info, func(ctx context.Context) error {
		p, err := info(ctx)
		plan = p
		return err
	})
	if err != nil {
		return nil, m.fail(), err
	}
	if plan == nil || len(plan.Phases) == 0 || plan.Phases[len(plan.Phases)-1] != Complete {
		return plan, m.fail(), fmt.Errorf("engine: the plan must end in %s", Complete)
	}
	exec := steps(plan)
	for _, phase := range plan.Phases[:len(plan.Phases)-1] {
		if exec[phase] == nil {
			// Refused before any phase ran: nothing was half done.
			return plan, m.fail(), fmt.Errorf("engine: the plan names phase %s, which has no step", phase)
		}
	}
	for _, phase := range plan.Phases {
		if phase == Complete {
			m.enter(Complete)
			break
		}
		if err := m.run(ctx, phase, exec[phase]); err != nil {
			return plan, m.fail(), err
		}
		if phase == plan.SourceDrainedAfter {
			m.emit(Event{Kind: SourceDrained, Phase: phase})
		}
	}
	return plan, m.entered, nil
}

// run enters phase and runs its step.
func (m *Machine) run(ctx context.Context, phase Phase, step Step) error {
	m.enter(phase)
	if err := ctx.Err(); err != nil {
		m.emit(Event{Kind: PhaseEnded, Phase: phase, Err: err})
		return err
	}
	if m.Wrap != nil {
		step = m.Wrap(phase, step)
	}
	err := step(ctx)
	m.emit(Event{Kind: PhaseEnded, Phase: phase, Err: err})
	return err
}

func (m *Machine) enter(phase Phase) {
	m.entered = append(m.entered, phase)
	log := m.Logger
	if log == nil {
		log = slog.Default()
	}
	log.Info("New phase: " + string(phase))
	m.emit(Event{Kind: PhaseStarted, Phase: phase})
}

func (m *Machine) fail() []Phase {
	m.enter(Error)
	return m.entered
}

func (m *Machine) emit(e Event) {
	if m.Observe != nil {
		m.Observe(e)
	}
}

// Phase names a step of an import. The values are what is logged ("New
// phase: X") and match CDI's importer where the step exists there; Verify
// and Commit are ours.
type Phase string

const (
	// Info inspects the source and the target and decides the plan.
	Info Phase = "Info"
	// TransferScratch copies the (decompressed) image to a scratch file
	// for qemu-img to read at random.
	TransferScratch Phase = "TransferScratch"
	// TransferDataFile streams raw data straight onto the target.
	TransferDataFile Phase = "TransferDataFile"
	// TransferDataDir extracts a tar stream into a staging directory.
	TransferDataDir Phase = "TransferDataDir"
	// TransferDelta signs the source and the target and writes the runs
	// that differ into the target, in place.
	TransferDelta Phase = "TransferDelta"
	// Validate checks the image qemu-img is about to read.
	Validate Phase = "Validate"
	// Convert writes the target with qemu-img.
	Convert Phase = "Convert"
	// Resize grows a file target to the requested size and applies
	// preallocation (for a blank disk: creates it at its size).
	Resize Phase = "Resize"
	// Verify reads source and target back and compares them.
	Verify Phase = "Verify"
	// Commit makes the data durable under its final name (fsync, rename).
	Commit Phase = "Commit"
	// Complete is entered only once the data is durable; it does no work.
	Complete Phase = "Complete"
	// Error is entered after the first failure.
	Error Phase = "Error"
)

// Phases returns every phase, in the order an import may pass them. It is
// the one list of the constants above (TestPhasesListsEveryDeclaredPhase
// reads their declarations): whatever enumerates phases (CDI's phase
// gauge, docs) takes it from here.
func Phases() []Phase {
	return []Phase{Info, TransferScratch, TransferDataFile, TransferDataDir, TransferDelta, Validate, Convert,
		Resize, Verify, Commit, Complete, Error}
}

// EventKind says what happened.
type EventKind int

const (
	// PhaseStarted: the machine entered Event.Phase (Complete and Error
	// included).
	PhaseStarted EventKind = iota + 1
	// PhaseEnded: Event.Phase returned; Event.Err is its error, if any.
	PhaseEnded
	// SourceDrained: every byte of the source has been received and
	// validated (checksums, image structure); what follows works on the
	// target alone. Event.Phase is the phase after which that held.
	SourceDrained
)

func (k EventKind) String() string {
	switch k {
	case PhaseStarted:
		return "PhaseStarted"
	case PhaseEnded:
		return "PhaseEnded"
	case SourceDrained:
		return "SourceDrained"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is what the machine tells its observer, synchronously, from the
// goroutine running the import (importer.Event, field for field).
type Event struct {
	Kind  EventKind
	Phase Phase
	Err   error
}

package importer

import (
	"context"
	"fmt"
	"log/slog"
)

// A phaseStep does the work of one phase.
type phaseStep func(ctx context.Context) error

// machine runs an import: Info decides a Plan, then the plan's phases run in
// order. It logs every phase as it is entered ("New phase: X"), tells the
// observer, and stops at the first error by entering Error. Phases do not
// pick their successor, so a phase cannot be entered twice.
type machine struct {
	// Logger receives the phase log; nil: slog.Default().
	Logger *slog.Logger
	// Observe, when set, is called with every event, synchronously.
	Observe func(Event)
	// Wrap, when set, may decorate the step of any phase (tests inject
	// faults with it).
	Wrap func(Phase, phaseStep) phaseStep

	entered []Phase
}

// Run enters Info and runs info, then the steps of the plan it returned,
// ending in Complete. It returns the plan (nil when Info failed), the
// phases entered (ending in Complete, or in Error after a failure) and the
// first error.
func (m *machine) Run(ctx context.Context, info func(context.Context) (*importPlan, error), steps func(*importPlan) map[Phase]phaseStep) (*importPlan, []Phase, error) {
	var plan *importPlan
	err := m.run(ctx, PhaseInfo, func(ctx context.Context) error {
		p, err := info(ctx)
		plan = p
		return err
	})
	if err != nil {
		return nil, m.fail(), err
	}
	if plan == nil || len(plan.Phases) == 0 || plan.Phases[len(plan.Phases)-1] != PhaseComplete {
		return plan, m.fail(), fmt.Errorf("engine: the plan must end in %s", PhaseComplete)
	}
	exec := steps(plan)
	for _, phase := range plan.Phases[:len(plan.Phases)-1] {
		if exec[phase] == nil {
			// Refused before any phase ran: nothing was half done.
			return plan, m.fail(), fmt.Errorf("engine: the plan names phase %s, which has no step", phase)
		}
	}
	for _, phase := range plan.Phases {
		if phase == PhaseComplete {
			m.enter(PhaseComplete)
			break
		}
		if err := m.run(ctx, phase, exec[phase]); err != nil {
			return plan, m.fail(), err
		}
		if phase == plan.SourceDrainedAfter {
			m.emit(Event{Kind: EventSourceDrained, Phase: phase})
		}
	}
	return plan, m.entered, nil
}

// run enters phase and runs its step.
func (m *machine) run(ctx context.Context, phase Phase, step phaseStep) error {
	m.enter(phase)
	if err := ctx.Err(); err != nil {
		m.emit(Event{Kind: EventPhaseEnded, Phase: phase, Err: err})
		return err
	}
	if m.Wrap != nil {
		step = m.Wrap(phase, step)
	}
	err := step(ctx)
	m.emit(Event{Kind: EventPhaseEnded, Phase: phase, Err: err})
	return err
}

func (m *machine) enter(phase Phase) {
	m.entered = append(m.entered, phase)
	log := m.Logger
	if log == nil {
		log = slog.Default()
	}
	log.Info("New phase: " + string(phase))
	m.emit(Event{Kind: EventPhaseStarted, Phase: phase})
}

func (m *machine) fail() []Phase {
	m.enter(PhaseError)
	return m.entered
}

func (m *machine) emit(e Event) {
	if m.Observe != nil {
		m.Observe(e)
	}
}

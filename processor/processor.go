package processor

import (
	"context"
	"fmt"
	"log/slog"
)

// Executor does the work of one phase and returns the phase to run next.
type Executor func(ctx context.Context) (Phase, error)

// Processor is a phase machine. The zero value is not usable; call New.
type Processor struct {
	executors map[Phase]Executor
	log       *slog.Logger
	onPhase   func(Phase)
}

// New returns a Processor with no executors. onPhase, when not nil, is
// called as each phase starts (for progress reporting).
func New(log *slog.Logger, onPhase func(Phase)) *Processor {
	if log == nil {
		log = slog.Default()
	}
	return &Processor{executors: map[Phase]Executor{}, log: log, onPhase: onPhase}
}

// Register sets the executor of a phase, replacing any earlier one.
func (p *Processor) Register(phase Phase, exec Executor) { p.executors[phase] = exec }

// Executor returns the executor registered for phase, or nil.
func (p *Processor) Executor(phase Phase) Executor { return p.executors[phase] }

// Run executes phases from start until Complete. It returns the phases
// entered, in order (ending in Complete, or in Error after a failure).
func (p *Processor) Run(ctx context.Context, start Phase) ([]Phase, error) {
	var path []Phase
	seen := map[Phase]bool{}
	fail := func(err error) ([]Phase, error) {
		path = append(path, Error)
		p.enter(Error)
		return path, err
	}
	for phase := start; ; {
		if seen[phase] {
			return fail(fmt.Errorf("loop detected on phase %s", phase))
		}
		seen[phase] = true
		path = append(path, phase)
		p.enter(phase)
		if phase == Complete {
			return path, nil
		}
		exec := p.executors[phase]
		if exec == nil {
			return fail(fmt.Errorf("unknown processing phase %s", phase))
		}
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		next, err := exec(ctx)
		if err != nil {
			return fail(err)
		}
		if next == Error {
			return fail(fmt.Errorf("phase %s ended in Error without a cause", phase))
		}
		phase = next
	}
}

func (p *Processor) enter(phase Phase) {
	p.log.Info("New phase: " + string(phase))
	if p.onPhase != nil {
		p.onPhase(phase)
	}
}

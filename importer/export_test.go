package importer

import (
	"context"
)

// WithPhaseHook returns o with hook decorating the work of every phase
// (step runs the phase itself). Tests inject faults with it; it is not API.
func WithPhaseHook(o Options, hook func(phase Phase, step func(context.Context) error) func(context.Context) error) Options {
	o.wrapPhase = func(phase Phase, step phaseStep) phaseStep {
		return phaseStep(hook(phase, step))
	}
	return o
}

// AfterPhase returns o with then run once phase's own work succeeded;
// its error is the phase's (tests cut an import there).
func AfterPhase(o Options, phase Phase, then func(context.Context) error) Options {
	return WithPhaseHook(o, func(p Phase, step func(context.Context) error) func(context.Context) error {
		if p != phase {
			return step
		}
		return func(ctx context.Context) error {
			if err := step(ctx); err != nil {
				return err
			}
			return then(ctx)
		}
	})
}

// WithStreamDecodeBuffer returns o with the stream decoder's buffer of
// clusters that precede their table bounded to n bytes.
func WithStreamDecodeBuffer(o Options, n int64) Options {
	o.streamDecodeMaxBuffered = n
	return o
}

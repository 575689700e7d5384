package importer

import (
	"context"

	"github.com/diskimport/engine/internal/engine"
)

// WithPhaseHook returns o with hook decorating the work of every phase
// (step runs the phase itself). Tests inject faults with it; it is not API.
func WithPhaseHook(o Options, hook func(phase Phase, step func(context.Context) error) func(context.Context) error) Options {
	o.wrapPhase = func(phase Phase, step engine.Step) engine.Step {
		return engine.Step(hook(phase, step))
	}
	return o
}

// WithStreamDecodeBuffer returns o with the stream decoder's buffer of
// clusters that precede their table bounded to n bytes.
func WithStreamDecodeBuffer(o Options, n int64) Options {
	o.streamDecodeMaxBuffered = n
	return o
}

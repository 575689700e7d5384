package engine

import "fmt"

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

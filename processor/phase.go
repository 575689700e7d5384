// Package processor runs an import as a machine of named phases. Each phase
// has an executor that does its work and names the next phase; the machine
// logs every transition ("New phase: X"), refuses to enter a phase twice (a
// loop would otherwise spin forever on a bad source) and stops at Complete
// or at the first error. Callers may replace or wrap any phase's executor.
package processor

// Phase names a step of an import. The values are what is logged and match
// CDI's importer where the step exists there.
type Phase string

const (
	Info             Phase = "Info"
	TransferScratch  Phase = "TransferScratch"
	TransferDataFile Phase = "TransferDataFile"
	TransferDataDir  Phase = "TransferDataDir"
	Validate         Phase = "Validate"
	Convert          Phase = "Convert"
	Resize           Phase = "Resize"
	Complete         Phase = "Complete"
	Error            Phase = "Error"
)

package engine

import "sync"

// Shares of the whole import's percentage: on the scratch route the
// transfer to scratch fills the first half and the conversion the rest;
// 100 is kept for Complete, entered once the data is durable.
const (
	scratchTransferShare = 50.0
	beforeComplete       = 99.99
)

// overallPercent turns the current phase's percentage into one percentage
// of the whole import that never goes back: -1 until something is known,
// 100 only at Complete.
type overallPercent struct {
	mu      sync.Mutex
	scratch bool // TransferScratch was seen: a Convert follows
	known   bool
	value   float64
}

// update takes the phase and its percentage (-1: unknown) and returns the
// whole import's.
func (o *overallPercent) update(phase Phase, phasePercent float64) float64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	if v, ok := o.of(phase, phasePercent); ok && (!o.known || v > o.value) {
		o.value, o.known = v, true
	}
	if !o.known {
		return -1
	}
	return o.value
}

func (o *overallPercent) of(phase Phase, pct float64) (float64, bool) {
	switch phase {
	case TransferScratch:
		o.scratch = true
		return pct * scratchTransferShare / 100, pct >= 0
	case TransferDataFile, TransferDataDir:
		return min(pct, beforeComplete), pct >= 0
	case Validate:
		return scratchTransferShare, o.scratch
	case Convert:
		start := 0.0
		if o.scratch {
			start = scratchTransferShare
		}
		return min(start+pct*(100-start)/100, beforeComplete), pct >= 0
	case Resize, Verify, Commit:
		return beforeComplete, true
	case Complete:
		return 100, true
	}
	return 0, false
}

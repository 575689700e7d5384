package cdi

import (
	"math"
	"sync"
	"time"

	"github.com/diskimport/engine/importer"
)

// beforeComplete caps the percentage until the import returned success:
// 100 is kept for the moment the import is complete and synced.
const beforeComplete = 99.99

// ProgressState is what ProgressTracker knows of a running import.
type ProgressState struct {
	Phase string
	// Percent is CDI's progress: of the whole import, never going back,
	// 100 only once it is complete.
	Percent      float64
	BytesRead    int64
	BytesWritten int64
	SourceSize   int64 // -1 when unknown
	// ReadRate is the bytes read per second over the last interval.
	ReadRate float64
	Retries  int
}

// ProgressTracker follows an import through the engine's snapshots
// (importer.Options.Progress); the metrics and the progress log read it.
// The engine reports one percentage of the whole import (never going
// back); the tracker cuts it to CDI's two decimals and keeps 100 for the
// moment the import returned success, as CDI's controller shows it.
type ProgressTracker struct {
	mu       sync.Mutex
	now      func() time.Time
	state    ProgressState
	complete bool
	lastRead int64
	lastAt   time.Time
}

// NewProgressTracker returns a tracker at 0%, created as the import
// starts (the first rate counts from then).
func NewProgressTracker() *ProgressTracker { return newProgressTracker(time.Now) }

func newProgressTracker(now func() time.Time) *ProgressTracker {
	return &ProgressTracker{now: now, lastAt: now(), state: ProgressState{SourceSize: -1}}
}

// minRateInterval keeps the rate from being measured over a few
// milliseconds (the engine reports at every phase change too).
const minRateInterval = 500 * time.Millisecond

// Observe takes one snapshot of the engine's.
func (t *ProgressTracker) Observe(p importer.Progress) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if dt := now.Sub(t.lastAt); dt >= minRateInterval {
		t.state.ReadRate = max(0, float64(p.BytesRead-t.lastRead)/dt.Seconds())
		t.lastRead, t.lastAt = p.BytesRead, now
	}
	t.state.Phase = string(p.Phase)
	t.state.BytesRead, t.state.BytesWritten, t.state.SourceSize = p.BytesRead, p.BytesWritten, p.SourceSize
	if v := p.Percent; v > t.state.Percent && !t.complete {
		t.state.Percent = floorHundredth(min(v, beforeComplete))
	}
}

// Complete marks the import complete (the engine returned success: the
// image is on stable storage): 100%.
func (t *ProgressTracker) Complete() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.complete = true
	t.state.Percent = 100
	t.state.Phase = "Complete"
}

// SetRetries records the retries of the finished import.
func (t *ProgressTracker) SetRetries(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.state.Retries = n
}

// State returns the current state.
func (t *ProgressTracker) State() ProgressState {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.state
}

// floorHundredth cuts v to two decimals, CDI's precision. Prometheus
// writes a float in its shortest form, which below 0.0001 is exponent
// notation ("1e-05") that the controller's regular expression would read
// as 1; two decimals never are.
func floorHundredth(v float64) float64 {
	return math.Floor(v*100) / 100
}

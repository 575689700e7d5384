package importer

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/diskimport/engine/internal/iostage"
	"github.com/diskimport/engine/internal/volume"
)

const progressInterval = time.Second

// meter is what the progress reporter reads, from its own goroutine, while
// the phases run: atomics the phases store into.
type meter struct {
	phase          atomic.Value // string; set by the machine's events
	counter        atomic.Pointer[iostage.Counter]
	sourceSize     atomic.Int64
	writer         atomic.Pointer[volume.Writer]       // the streamed copy's
	deviceWriter   atomic.Pointer[volume.DeviceWriter] // qemu-img's, onto a device
	decoded        atomic.Pointer[volume.GuestWriter]  // the stream decoder's
	delta          atomic.Pointer[passMeter]           // a delta pass's
	convertPercent atomic.Uint64                       // math.Float64bits
	// rangedRead counts the ranged route's range reads, which cover the
	// head the counter saw again.
	rangedRead iostage.RangeCounter
	// inPlaceSize is what qemu-img reads of a local image on the in-place
	// route (its allocated bytes), read as its conversion goes on.
	inPlaceSize atomic.Int64

	overall overallPercent // the whole import's percentage
}

// bytesRead is the bytes of the source read: the stream's, together with
// the distinct bytes the range reads covered, or, on the in-place route,
// the share of the local image qemu-img has converted, or what a delta
// pass signed. It does not pass the source's size.
func (m *meter) bytesRead() int64 {
	var n int64
	if c := m.counter.Load(); c != nil {
		n = c.Count()
	}
	if d := m.delta.Load(); d != nil {
		n = max(n, d.SourceRead())
	}
	n = m.rangedRead.Distinct(n)
	if total := m.inPlaceSize.Load(); total > 0 {
		done := int64(float64(total) * math.Float64frombits(m.convertPercent.Load()) / 100)
		n = max(n, min(done, total))
	}
	return n
}

// progressReporter hands the meter's snapshots to request.Progress: about
// once a second, and at once when a phase starts, so that a reader that
// shows the phase (CDI's phase gauge, the bar's label) never lags a phase
// behind (a Commit or a Verify of under a second was never reported). One
// snapshot at a time: Progress is never called concurrently.
type progressReporter struct {
	mu     sync.Mutex
	report func(Progress)
	meter  *meter
}

// now reports a snapshot at once.
func (r *progressReporter) now() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.report(r.meter.snapshot())
}

// startProgress reports progress to request.Progress about once a second
// (and at each phase's start, through a.progress) until the returned stop
// function is called, which reports once more.
func (a *attempt) startProgress(ctx context.Context) (stop func()) {
	if a.req.Progress == nil {
		return func() {}
	}
	r := &progressReporter{report: a.req.Progress, meter: &a.meter}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(progressInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				r.now()
			}
		}
	}()
	a.progress = r // set before the machine runs, which reads it
	return func() {
		cancel()
		<-done
		r.now()
	}
}

func (m *meter) snapshot() Progress {
	p := Progress{
		Phase:      Phase(m.phase.Load().(string)),
		SourceSize: m.sourceSize.Load(),
		Percent:    -1,
	}
	p.BytesRead = m.bytesRead()
	if d := m.deviceWriter.Load(); d != nil { // qemu-img writing a device
		p.BytesWritten = d.Written()
	} else if g := m.decoded.Load(); g != nil {
		p.BytesWritten = g.Written()
	} else if w := m.writer.Load(); w != nil {
		p.BytesWritten = w.Written()
	} else if d := m.delta.Load(); d != nil {
		p.BytesWritten = d.Written()
	}
	p.PhasePercent = -1
	switch {
	case p.Phase == PhaseTransferDelta && p.SourceSize > 0:
		// Signing both sides is most of a pass: it goes by the bytes
		// compared.
		p.PhasePercent = min(100, 100*float64(m.delta.Load().Compared())/float64(p.SourceSize))
	case p.Phase == PhaseConvert:
		p.PhasePercent = math.Float64frombits(m.convertPercent.Load())
	case p.SourceSize > 0:
		p.PhasePercent = min(100, 100*float64(p.BytesRead)/float64(p.SourceSize))
	}
	p.Percent = m.overall.update(p.Phase, p.PhasePercent)
	return p
}

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
	case PhaseTransferScratch:
		o.scratch = true
		return pct * scratchTransferShare / 100, pct >= 0
	case PhaseTransferDataFile, PhaseTransferDataDir, PhaseTransferDelta:
		return min(pct, beforeComplete), pct >= 0
	case PhaseValidate:
		return scratchTransferShare, o.scratch
	case PhaseConvert:
		start := 0.0
		if o.scratch {
			start = scratchTransferShare
		}
		return min(start+pct*(100-start)/100, beforeComplete), pct >= 0
	case PhaseResize, PhaseVerify, PhaseCommit:
		return beforeComplete, true
	case PhaseComplete:
		return 100, true
	case PhaseError:
		// What was done stays; a failure before anything was measured
		// is 0% done, not unknown.
		return 0, true
	}
	return 0, false
}

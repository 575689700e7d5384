package engine

import (
	"context"
	"math"
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
	deviceWriter   atomic.Pointer[volume.DeviceWriter] // qemu-img's or the stream decoder's, onto a device
	decodedFile    atomic.Pointer[countingSink]        // the stream decoder's, onto a file
	convertPercent atomic.Uint64                       // math.Float64bits
	// rangedRead counts the bytes of the ranged route's range reads, on
	// top of the head the counter saw.
	rangedRead atomic.Int64

	overall overallPercent // the whole import's percentage
}

// bytesRead is what crossed the wire: the stream's bytes and the range
// reads'.
func (m *meter) bytesRead() int64 {
	n := m.rangedRead.Load()
	if c := m.counter.Load(); c != nil {
		n += c.Count()
	}
	return n
}

// startProgress reports progress to Request.Progress about once a second
// until the returned stop function is called, which reports once more.
func (a *attempt) startProgress(ctx context.Context) (stop func()) {
	report := a.req.Progress
	if report == nil {
		return func() {}
	}
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
				report(a.meter.snapshot())
			}
		}
	}()
	return func() {
		cancel()
		<-done
		report(a.meter.snapshot())
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
	} else if f := m.decodedFile.Load(); f != nil {
		p.BytesWritten = f.written.Load()
	} else if w := m.writer.Load(); w != nil {
		p.BytesWritten = w.Written()
	}
	p.PhasePercent = -1
	switch {
	case p.Phase == Convert:
		p.PhasePercent = math.Float64frombits(m.convertPercent.Load())
	case p.SourceSize > 0:
		p.PhasePercent = min(100, 100*float64(p.BytesRead)/float64(p.SourceSize))
	}
	p.Percent = m.overall.update(p.Phase, p.PhasePercent)
	return p
}

package engine

import (
	"context"
	"math"
	"time"
)

const progressInterval = time.Second

// startProgress reports progress to o.Progress about once a second until
// the returned stop function is called.
func (j *job) startProgress(ctx context.Context) (stop func()) {
	if j.opts.Progress == nil {
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
				j.opts.Progress(j.snapshot())
			}
		}
	}()
	return func() {
		cancel()
		<-done
		j.opts.Progress(j.snapshot())
	}
}

func (j *job) snapshot() Progress {
	p := Progress{
		Phase:      Phase(j.phase.Load().(string)),
		SourceSize: j.sourceSize.Load(),
		Percent:    -1,
	}
	if c := j.counter.Load(); c != nil {
		p.BytesRead = c.Count()
	}
	if d := j.deviceWriter.Load(); d != nil { // qemu-img writing a device
		p.BytesWritten = d.Written()
	} else if w := j.writer.Load(); w != nil {
		p.BytesWritten = w.Written()
	}
	switch {
	case p.Phase == Convert:
		p.Percent = math.Float64frombits(j.convertPercent.Load())
	case p.SourceSize > 0:
		p.Percent = min(100, 100*float64(p.BytesRead)/float64(p.SourceSize))
	}
	return p
}

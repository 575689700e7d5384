package cdi

import (
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// ProgressLogInterval is how often ProgressLog writes a line.
const ProgressLogInterval = 3 * time.Second

// ProgressLog writes the tracker's state as a log line every interval, for
// logs read off a terminal (kubectl logs), as CDI's importer logs its
// percentage.
type ProgressLog struct {
	tracker  *ProgressTracker
	log      *slog.Logger
	interval time.Duration
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
}

// StartProgressLog starts logging; Stop ends it.
func StartProgressLog(tracker *ProgressTracker, log *slog.Logger, interval time.Duration) *ProgressLog {
	l := &ProgressLog{tracker: tracker, log: log, interval: interval, stop: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	return l
}

func (l *ProgressLog) run() {
	defer close(l.done)
	tick := time.NewTicker(l.interval)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
			s := l.tracker.State()
			if s.Phase == "" {
				continue // no snapshot yet
			}
			l.log.Info("Progress", "phase", s.Phase, "percent", fmt.Sprintf("%.2f", s.Percent),
				"read", s.BytesRead, "written", s.BytesWritten, "sourceSize", s.SourceSize,
				"bytesPerSecond", int64(s.ReadRate))
		}
	}
}

// Stop ends the log lines.
func (l *ProgressLog) Stop() {
	l.once.Do(func() { close(l.stop) })
	<-l.done
}

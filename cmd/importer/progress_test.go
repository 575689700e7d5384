package main

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/diskimport/engine/internal/cdi"
)

// The bar takes updates from the engine's goroutine while log lines are
// written through it, and ends at 100% only through finish.
func TestTerminalBarUpdatesAndFinish(t *testing.T) {
	var out bytes.Buffer
	bar := newTerminalBar(&out)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; i <= 100; i++ {
			bar.update(cdi.ProgressState{Phase: "TransferDataFile", Percent: min(float64(i), 99.99), BytesRead: int64(i) << 20, SourceSize: 100 << 20})
			time.Sleep(2 * time.Millisecond)
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 5; i++ {
			bar.Write([]byte("time=now level=INFO msg=\"a log line\"\n"))
		}
	}()
	wg.Wait()
	assert.False(t, bar.bar.Completed(), "99.99% is not complete")
	bar.update(cdi.ProgressState{Phase: "Complete", Percent: 100, BytesRead: 100 << 20, SourceSize: 100 << 20})
	bar.finish(true)
	s := out.String()
	assert.Contains(t, s, "a log line")
	assert.Regexp(t, `Complete +\[=+\] 100\.0%  100\.0 MiB / 100\.0 MiB`, s)
}

func TestEstimateAndAverage(t *testing.T) {
	assert.Equal(t, 0*time.Second, estimate(0.1, time.Minute), "too early to tell")
	assert.Equal(t, 30*time.Second, estimate(50, 30*time.Second))
	assert.Equal(t, 0*time.Second, estimate(100, time.Minute))
	assert.Equal(t, 2.0, averageRate(10, 5*time.Second))
	assert.Equal(t, 0.0, averageRate(10, 0))
}

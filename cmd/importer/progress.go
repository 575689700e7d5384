package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/importer"
)

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// terminalProgress redraws one status line on a terminal.
type terminalProgress struct {
	w        io.Writer
	start    time.Time
	lastRead int64
	lastAt   time.Time
}

func newTerminalProgress(w io.Writer) *terminalProgress {
	now := time.Now()
	return &terminalProgress{w: w, start: now, lastAt: now}
}

func (t *terminalProgress) update(p importer.Progress) {
	now := time.Now()
	rate := 0.0
	if dt := now.Sub(t.lastAt).Seconds(); dt > 0 {
		rate = float64(p.BytesRead-t.lastRead) / dt
	}
	t.lastRead, t.lastAt = p.BytesRead, now
	pct := ""
	if p.Percent >= 0 {
		pct = fmt.Sprintf("%5.1f%% ", p.Percent)
	}
	fmt.Fprintf(t.w, "\r\033[K%-16s %sread %s, written %s, %s/s", p.Phase, pct,
		humanBytes(p.BytesRead), humanBytes(p.BytesWritten), humanBytes(int64(rate)))
	if p.Phase == "Complete" || p.Phase == "Error" {
		fmt.Fprintln(t.w)
	}
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

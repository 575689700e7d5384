package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/units"
)

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// barScale is the bar's total: the import's percentage in hundredths.
const barScale = 100 * 100

// terminalBar is the progress bar on a terminal, drawn by mpb. It shows
// the tracker's state (one percentage of the whole import, never going
// back, 100 only once the import is complete), the bytes read of the
// total, the average rate since the start and an ETA. While a stream of
// unknown length is read there is no percentage to show: a spinner, the
// bytes read and the rate instead. Log lines go through Write, so they are
// printed above the bar instead of over it.
type terminalBar struct {
	p     *mpb.Progress
	bar   *mpb.Bar
	start time.Time

	mu    sync.Mutex
	state cdi.ProgressState
}

func newTerminalBar(w io.Writer) *terminalBar {
	t := &terminalBar{start: time.Now()}
	opts := []mpb.ContainerOption{mpb.WithOutput(w), mpb.WithAutoRefresh(), mpb.WithWidth(maxBarWidth), mpb.WithRefreshRate(200 * time.Millisecond)}
	if c := consoleFor(w); c != nil {
		opts = append(opts, mpb.WithConsoleWriter(c))
	}
	t.p = mpb.New(opts...)
	t.bar = t.p.New(barScale, lengthAwareFiller{
		bar:     mpb.BarStyle().Lbound("[").Rbound("]").Build(),
		spinner: mpb.SpinnerStyle().Build(),
		unknown: t.lengthUnknown,
	},
		mpb.PrependDecorators(decor.Any(t.phase, decor.WCSyncSpaceR)),
		mpb.AppendDecorators(decor.Any(t.numbers)),
	)
	return t
}

// Write prints log lines above the bar.
func (t *terminalBar) Write(b []byte) (int, error) { return t.p.Write(b) }

// update takes the tracker's latest state.
func (t *terminalBar) update(s cdi.ProgressState) {
	t.mu.Lock()
	t.state = s
	t.mu.Unlock()
	if s.Percent < 100 { // 100 only through finish: the data is durable
		t.bar.SetCurrent(int64(s.Percent * 100))
	}
}

// finish completes the bar (a complete import) or leaves it where it
// stopped, and waits until mpb has drawn its last frame.
func (t *terminalBar) finish(complete bool) {
	if complete {
		t.bar.SetCurrent(barScale)
	} else {
		t.bar.Abort(false)
	}
	t.p.Wait()
}

func (t *terminalBar) snapshot() cdi.ProgressState {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.state
}

// lengthUnknown: the source is being read and its length is unknown, so
// the percentage would stand still until it ends.
func (t *terminalBar) lengthUnknown() bool {
	s := t.snapshot()
	return s.SourceSize <= 0 && s.Percent <= 0 && strings.HasPrefix(s.Phase, "Transfer")
}

// lengthAwareFiller draws the bar, or a spinner while unknown says the
// length is unknown.
type lengthAwareFiller struct {
	bar, spinner mpb.BarFiller
	unknown      func() bool
}

func (f lengthAwareFiller) Build() mpb.BarFiller { return f }

func (f lengthAwareFiller) Fill(w io.Writer, st decor.Statistics) error {
	if f.unknown() && !st.Completed && !st.Aborted {
		return f.spinner.Fill(w, st)
	}
	return f.bar.Fill(w, st)
}

func (t *terminalBar) phase(decor.Statistics) string {
	return barLabel(importer.Phase(t.snapshot().Phase))
}

// barLabels name each phase in the words of what a person waits for; the
// log and the JSON keep the phase names. TestBarLabelsNameEveryPhase
// checks every phase of importer.Phases has one.
var barLabels = map[importer.Phase]string{
	importer.PhaseInfo:             "Inspecting",
	importer.PhaseTransferScratch:  "Downloading",
	importer.PhaseTransferDataFile: "Writing",
	importer.PhaseTransferDataDir:  "Extracting",
	importer.PhaseTransferDelta:    "Comparing",
	importer.PhaseValidate:         "Checking",
	importer.PhaseConvert:          "Converting",
	importer.PhaseResize:           "Resizing",
	importer.PhaseVerify:           "Verifying",
	importer.PhaseCommit:           "Syncing",
	importer.PhaseComplete:         "Done",
	importer.PhaseError:            "Failed",
	phaseUpload:                    "Uploading",
	phaseWaiting:                   "Waiting for the server",
}

// barLabel is the bar's label for phase ("Inspecting" before the first).
func barLabel(phase importer.Phase) string {
	if phase == "" {
		phase = importer.PhaseInfo
	}
	if l, ok := barLabels[phase]; ok {
		return l
	}
	return string(phase)
}

// The bar's width: at most maxBarWidth columns (the cells between its
// brackets, at 200 columns), and the numbers after it give up their least
// needed parts before the bar gets narrower than minBarWidth.
const (
	maxBarWidth = 100
	minBarWidth = 12
)

// numbers is "42.0%  312.0 MiB / 752.0 MiB  25.3 MiB/s  ETA 18s", or
// "312.0 MiB  25.3 MiB/s" while a stream of unknown length is read: the
// longest of numbersVariants that leaves the bar minBarWidth columns of
// st.AvailableWidth (what the label left of the terminal's width).
func (t *terminalBar) numbers(st decor.Statistics) string {
	variants := t.numbersVariants(st)
	for _, v := range variants {
		if len(v)+minBarWidth+2 <= st.AvailableWidth { // +2: the spaces around the bar
			return v
		}
	}
	return variants[len(variants)-1]
}

// numbersVariants are the numbers from the fullest to the shortest: the
// ETA goes first, then the rate, then the total, the percentage last.
func (t *terminalBar) numbersVariants(st decor.Statistics) []string {
	s := t.snapshot()
	elapsed := time.Since(t.start)
	rate := units.Rate(averageRate(s.BytesRead, elapsed))
	read := units.Bytes(s.BytesRead)
	if t.lengthUnknown() && !st.Completed && !st.Aborted {
		return []string{read + "  " + rate, read}
	}
	pct := float64(st.Current) / 100
	share := fmt.Sprintf("%5.1f%%", pct)
	total := read
	if s.SourceSize > 0 {
		total += " / " + units.Bytes(s.SourceSize)
	}
	full := share + "  " + total + "  " + rate
	variants := []string{full, share + "  " + total, share + "  " + read, share}
	if eta := estimate(pct, elapsed); eta > 0 && !st.Completed && !st.Aborted {
		variants = append([]string{full + "  ETA " + eta.Round(time.Second).String()}, variants...)
	}
	return variants
}

// averageRate is n bytes over elapsed, per second (0 before any time passed).
func averageRate(n int64, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return float64(n) / elapsed.Seconds()
}

// estimate is the time left at pct percent after elapsed, assuming the
// average pace holds; 0 when it cannot be told yet.
func estimate(pct float64, elapsed time.Duration) time.Duration {
	if pct <= 0.5 || pct >= 100 || elapsed < time.Second {
		return 0
	}
	return time.Duration(float64(elapsed) * (100 - pct) / pct)
}

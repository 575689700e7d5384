package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vbauerster/mpb/v8/decor"
)

// failedBar is the bar's last frame after a failure.
var failedBar = regexp.MustCompile(`^Failed +\[[=>\-_ ]*\] +[0-9.]+%`)

// TestTerminalBarFitsEveryWidthAndEndsCleanlyOnCtrlC: at 60, 80, 100,
// 120 and 200 columns no line of the pane is wider than the pane (tmux
// joins a wrapped line back, -J), while the bar is drawn and after a
// Ctrl-C mid-transfer, whose last screen is the ended bar ("Failed"), then
// the one cause line and what became of the target. Before, the terminal's
// echoed ^C moved the redrawn bar two columns right: "WrFailed [==>…]
// 10.5% … 1.0 MiB" with "/s" wrapped onto the next line (checked).
func TestTerminalBarFitsEveryWidthAndEndsCleanlyOnCtrlC(t *testing.T) {
	dir, bin := builtImporter(t, "tmux")
	data := bytes.Repeat([]byte("dsk\x00"), 8<<20/4) // 8 MiB at 1 MiB/s: still running when Ctrl-C comes
	srv := pacedServer(t, data, 64<<10, 62*time.Millisecond, 0)
	for _, cols := range []int{60, 80, 100, 120, 200} {
		t.Run(fmt.Sprint(cols), func(t *testing.T) {
			t.Parallel()
			// A short target name: its state line fits the narrowest pane.
			dest := fmt.Sprintf("disk%d.img", cols)
			pane := startTmuxSized(t, cols, 20, fmt.Sprintf("cd %s && %s %s/disk.img %s; echo EXIT=$?; sleep 60", dir, bin, srv.URL, dest))
			mid := pane.waitUntil(func(screen string) bool {
				return strings.Contains(screen, "MiB / 8.0 MiB") && !strings.Contains(screen, "  0.0%")
			}, time.Minute) // the transfer lasts 8 s once it begins
			t.Logf("during the transfer at %d columns:\n%s", cols, mid)
			assert.Regexp(t, `(?m)^Writing +\[[=>\-_ ]*\] +[0-9.]+% +[0-9.]+ [KM]iB`, mid)
			assertLinesFit(t, mid, cols)

			pane.tmux("send-keys", "C-c")
			end := pane.waitFor("EXIT=", time.Minute)
			t.Logf("at the end:\n%s", end)
			assertLinesFit(t, end, cols)
			assert.Contains(t, end, "EXIT=130")
			lines := screenLines(end)
			require.GreaterOrEqual(t, len(lines), 4, end)
			tail := lines[len(lines)-4:]
			assert.Regexp(t, failedBar, tail[0], "the bar ended, whole, at the first column")
			assert.Equal(t, "importer: import cancelled", tail[1])
			assert.Regexp(t, `^importer: .*`+dest, tail[2], "what became of the target")
			assert.Equal(t, "EXIT=130", tail[3])
			for _, l := range lines[:len(lines)-4] {
				assert.NotContains(t, l, "Writing", "a bar frame left behind: %q", l)
			}
		})
	}
}

// TestTerminalBarServerFailureEndsCleanly: a source that fails for good
// mid-transfer ends the bar where it stopped ("Failed", within the pane),
// then one cause line and the target's state line follow it. Above the
// bar, the retry and the restart (the server gave no validator to resume
// with) are one sentence each, not WARN records (the restart's was a WARN
// record before: checked).
func TestTerminalBarServerFailureEndsCleanly(t *testing.T) {
	dir, bin := builtImporter(t, "tmux")
	data := bytes.Repeat([]byte("dsk\x00"), 4<<20/4)
	srv := pacedServer(t, data, 64<<10, 62*time.Millisecond, 2<<20) // cut after 2 MiB, then 403
	dest := filepath.Join(dir, "disk.img")
	const cols = 80
	pane := startTmuxSized(t, cols, 20, fmt.Sprintf("%s %s/disk.img %s; echo EXIT=$?; sleep 60", bin, srv.URL, dest))
	end := pane.waitFor("EXIT=", time.Minute)
	t.Logf("at the end:\n%s", end)
	assert.Contains(t, end, "EXIT=1")
	assert.Regexp(t, `(?m)^Connection to 127\.0\.0\.1:[0-9]+ dropped at 2\.0 MiB; retrying in [0-9.]+ s \(retry 1 of 10\)$`, end)
	assert.Regexp(t, `(?m)^127\.0\.0\.1:[0-9]+ cannot resume at 2\.0 MiB: the server gave no ETag or Last-Modified to resume safely; starting over from the beginning \(restart 1\)$`, end)
	assert.NotContains(t, end, "level=WARN")
	lines := screenLines(end)
	require.GreaterOrEqual(t, len(lines), 4, end)
	tail := lines[len(lines)-4:]
	assert.Regexp(t, failedBar, tail[0])
	assert.LessOrEqual(t, len(tail[0]), cols)
	assert.Regexp(t, `^importer: import failed: .*403 Forbidden`, tail[1])
	assert.Equal(t, "importer: nothing was written to "+dest, tail[2])
	for _, l := range lines {
		if strings.Contains(l, "[") && strings.Contains(l, "%") {
			assert.Regexp(t, failedBar, l, "one bar, the ended one")
		}
	}
}

// screenLines are the pane's lines, trailing blanks and empty lines out.
func screenLines(screen string) []string {
	var lines []string
	for _, l := range strings.Split(screen, "\n") {
		if l = strings.TrimRight(l, " "); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// assertLinesFit checks that no line of a pane captured with -J (wrapped
// lines joined) is wider than cols: none wrapped.
func assertLinesFit(t *testing.T, screen string, cols int) {
	t.Helper()
	for _, l := range strings.Split(screen, "\n") {
		assert.LessOrEqual(t, len([]rune(strings.TrimRight(l, " "))), cols, "a line wider than the pane: %q", l)
	}
}

// TestBarNumbersGiveWayToTheBar: the numbers after the bar drop the ETA,
// then the rate, then the total before the bar gets narrower than
// minBarWidth; the percentage stays.
func TestBarNumbersGiveWayToTheBar(t *testing.T) {
	bar := &terminalBar{start: time.Now().Add(-10 * time.Second)}
	bar.state.Phase, bar.state.BytesRead, bar.state.SourceSize = "TransferDataFile", 5<<30, 20<<30
	st := decor.Statistics{Current: 2500, Total: barScale}
	for _, c := range []struct {
		avail int
		want  string
	}{
		{200, `^ 25\.0%  5\.0 GiB / 20\.0 GiB  512\.0 MiB/s  ETA 30s$`},
		{55, `^ 25\.0%  5\.0 GiB / 20\.0 GiB  512\.0 MiB/s$`},
		{40, `^ 25\.0%  5\.0 GiB / 20\.0 GiB$`},
		{30, `^ 25\.0%  5\.0 GiB$`},
		{10, `^ 25\.0%$`},
	} {
		st.AvailableWidth = c.avail
		got := bar.numbers(st)
		assert.Regexp(t, c.want, got, "at %d columns", c.avail)
		if c.avail > 20 {
			assert.LessOrEqual(t, len(got)+minBarWidth+2, c.avail)
		}
	}
}

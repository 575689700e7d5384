package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/uploadserver"
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
	assert.Regexp(t, `Done +\[=+\] 100\.0%  100\.0 MiB / 100\.0 MiB`, s)
}

// TestBarLabelsNameEveryPhase: the bar says in words what a person waits
// for, for every phase there is (it showed "TransferDataFile").
func TestBarLabelsNameEveryPhase(t *testing.T) {
	for _, p := range importer.Phases() {
		l := barLabel(p)
		assert.NotEqual(t, string(p), l, "phase %s has no words on the bar", p)
		assert.Regexp(t, `^[A-Z][a-z]+( [a-z]+)*$`, l)
	}
	assert.Equal(t, "Inspecting", barLabel(""))
}

func TestEstimateAndAverage(t *testing.T) {
	assert.Equal(t, 0*time.Second, estimate(0.1, time.Minute), "too early to tell")
	assert.Equal(t, 30*time.Second, estimate(50, 30*time.Second))
	assert.Equal(t, 0*time.Second, estimate(100, time.Minute))
	assert.Equal(t, 2.0, averageRate(10, 5*time.Second))
	assert.Equal(t, 0.0, averageRate(10, 0))
}

// Off a terminal, a slow import prints a progress line every few seconds
// between no other lines, and one final line with human sizes and the
// average speed; the engine's phase lines need -v.
func TestCLIProgressLinesOffTerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 7 s")
	}
	data := bytes.Repeat([]byte("dsk\x00"), 7<<20/4) // 7 MiB at 1 MiB/s, binary (a text body is refused)
	srv := pacedServer(t, data, 64<<10, 62*time.Millisecond, 0)
	dest := filepath.Join(t.TempDir(), "disk.img")
	code, _, stderr := runCLI(t, nil, env(nil), srv.URL+"/disk.img", dest)
	require.Equal(t, cdi.ExitOK, code)
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	require.GreaterOrEqual(t, len(lines), 2, stderr)
	progress := lines[:len(lines)-1]
	last := -1.0
	re := regexp.MustCompile(`msg=Progress phase=TransferDataFile percent=([0-9.]+) `)
	for _, l := range progress {
		if strings.Contains(l, "level=WARN") { // the test server's text/plain
			continue
		}
		m := re.FindStringSubmatch(l)
		require.NotNil(t, m, "only progress lines before the final one: %q", l)
		pct, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, pct, last, "percent never goes back")
		assert.Less(t, pct, 100.0, "100 only once durable")
		last = pct
	}
	assert.Regexp(t, `^Import complete: .*disk\.img, 7\.0 MiB \(raw, 7\.0 MiB read, 7\.0 MiB written\) in [0-9.]+ s, [0-9.]+ (KiB|MiB)/s read, [0-9.]+ (KiB|MiB)/s written$`, lines[len(lines)-1])
}

// tmuxPane runs a command in a detached tmux session on a private server
// and reads what its pane shows.
type tmuxPane struct {
	t      *testing.T
	socket string
}

func startTmux(t *testing.T, command string) *tmuxPane {
	t.Helper()
	return startTmuxSized(t, 150, 40, command)
}

// startTmuxSized is startTmux on a pane of cols columns and rows rows.
func startTmuxSized(t *testing.T, cols, rows int, command string) *tmuxPane {
	t.Helper()
	p := &tmuxPane{t: t, socket: fmt.Sprintf("importer-test-%d", time.Now().UnixNano())}
	p.tmux("new-session", "-d", "-x", strconv.Itoa(cols), "-y", strconv.Itoa(rows), command)
	t.Cleanup(func() { exec.Command("tmux", "-L", p.socket, "kill-server").Run() })
	return p
}

func (p *tmuxPane) tmux(args ...string) string {
	p.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-L", p.socket}, args...)...).CombinedOutput()
	require.NoError(p.t, err, string(out))
	return string(out)
}

func (p *tmuxPane) capture() string { return p.tmux("capture-pane", "-p", "-J") } // -J: wrapped lines joined

// waitFor polls the pane until it contains s.
func (p *tmuxPane) waitFor(s string, within time.Duration) string {
	p.t.Helper()
	return p.waitUntil(func(screen string) bool { return strings.Contains(screen, s) }, within)
}

// waitUntil captures the pane until done holds for its screen, or within
// has passed, and returns the last screen. tmux runs outside the test, so
// its screen can only be looked at again, not waited on. It returns as soon
// as done holds: within only bounds a failure, so the tests give a minute,
// which no loaded machine's slowness reaches.
func (p *tmuxPane) waitUntil(done func(screen string) bool, within time.Duration) string {
	p.t.Helper()
	deadline := time.Now().Add(within)
	for {
		screen := p.capture()
		if done(screen) || time.Now().After(deadline) {
			return screen
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// On a real terminal the bar shows the phase, percent, bytes of the total,
// an average rate and an ETA; -v's log lines are printed above it, never
// on its line; at the end the bar is at 100% and the final line follows.
func TestTerminalProgressBar(t *testing.T) {
	dir, bin := builtImporter(t, "tmux")
	data := bytes.Repeat([]byte("dsk\x00"), 6<<20/4) // 6 MiB at 1 MiB/s, binary (a text body is refused)
	srv := pacedServer(t, data, 64<<10, 62*time.Millisecond, 0)
	dest := filepath.Join(dir, "disk.img")
	pane := startTmux(t, fmt.Sprintf("%s -v %s/disk.img %s; echo EXIT=$?; sleep 60", bin, srv.URL, dest))

	bar := regexp.MustCompile(`Writing +\[[=>\-_ ]*\] +[0-9.]+% +[0-9.]+ [KM]iB / 6\.0 MiB +[0-9.]+ [KM]iB/s +ETA [0-9]+s`)
	// Until the bar shows (the transfer lasts 6 s once it begins, however
	// late a loaded machine starts it; a minute only bounds a failure).
	mid := pane.waitUntil(func(screen string) bool { return bar.MatchString(screen) && strings.Contains(screen, "ETA") }, time.Minute)
	t.Logf("during the transfer:\n%s", mid)
	assert.Regexp(t, bar, mid)
	for _, l := range strings.Split(mid, "\n") {
		if strings.Contains(l, "msg=") {
			assert.NotContains(t, l, "%", "a log line overwrote the bar: %q", l)
		}
	}
	assert.Contains(t, mid, `msg="New phase: TransferDataFile"`, "-v's log lines are shown")

	end := pane.waitFor("EXIT=", time.Minute)
	t.Logf("at the end:\n%s", end)
	assert.Contains(t, end, "EXIT=0")
	assert.Regexp(t, `Done +\[=+\] +100\.0%`, end)
	// The summary is broken after a comma where the pane (150 columns) is
	// too narrow for it, never mid-word.
	assert.Regexp(t, `Import complete: .*disk\.img, 6\.0 MiB \(raw, 6\.0 MiB read, 6\.0 MiB written\) in [0-9.]+ s,\s+[0-9.]+ [KM]iB/s read,\s+[0-9.]+ [KM]iB/s written`, end)
	_, summary, _ := strings.Cut(end, "Import complete: ")
	summary, _, _ = strings.Cut(summary, "EXIT=")
	for _, l := range strings.Split("Import complete: "+summary, "\n") {
		assert.LessOrEqual(t, len(l), 150, "a summary line wider than the pane: %q", l)
	}
	assert.NotContains(t, end, "\r")
}

// A stream of unknown length (no Content-Length) shows a spinner, the bytes
// read and the rate while it is read, not a bar and a percentage standing
// at 0.0 % until it ends.
func TestTerminalProgressUnknownLength(t *testing.T) {
	dir, bin := builtImporter(t, "tmux")
	data := bytes.Repeat([]byte("dsk\x00"), 5<<20/4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for off := 0; off < len(data); off += 64 << 10 {
			if _, err := w.Write(data[off : off+64<<10]); err != nil {
				return
			}
			w.(http.Flusher).Flush() // chunked: no length announced
			select {
			case <-r.Context().Done():
				return
			case <-time.After(62 * time.Millisecond):
			}
		}
	}))
	t.Cleanup(srv.Close)
	dest := filepath.Join(dir, "disk.img")
	pane := startTmux(t, fmt.Sprintf("%s %s/disk.img %s; echo EXIT=$?; sleep 60", bin, srv.URL, dest))

	line := regexp.MustCompile(`Writing +\S.* ([0-9.]+) ([KM]iB) +[0-9.]+ [KM]iB/s\s*$`)
	// Until a MiB count shows (the stream lasts 5 s once it begins).
	mid := pane.waitUntil(func(screen string) bool {
		m := lastMatch(line, screen)
		return m != nil && m[2] == "MiB"
	}, time.Minute)
	t.Logf("during the transfer:\n%s", mid)
	require.NotNil(t, lastMatch(line, mid), "bytes and rate shown")
	assert.NotContains(t, mid, "%", "a percentage is shown for a stream of unknown length")
	assert.NotContains(t, mid, "[", "a bar is shown for a stream of unknown length")

	end := pane.waitFor("EXIT=", time.Minute)
	t.Logf("at the end:\n%s", end)
	assert.Contains(t, end, "EXIT=0")
	assert.Regexp(t, `Done +\[=+\] +100\.0%`, end)
	sum := sha256.Sum256(data)
	assert.Equal(t, hex.EncodeToString(sum[:]), testimg.Digest(t, dest, -1))
}

// lastMatch is re's submatches in the last line of screen that matches.
func lastMatch(re *regexp.Regexp, screen string) []string {
	var m []string
	for _, l := range strings.Split(screen, "\n") {
		if s := re.FindStringSubmatch(l); s != nil {
			m = s
		}
	}
	return m
}

// jsonLogLines checks that every log line of stderr is a JSON object (the
// final summary line and "importer:" causes are not log lines) and
// returns their messages.
func jsonLogLines(t *testing.T, stderr string) []string {
	t.Helper()
	var msgs []string
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if strings.HasPrefix(l, "Import complete:") || strings.HasPrefix(l, "importer:") || l == "" {
			continue
		}
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &rec), "not a JSON log line: %q", l)
		assert.Contains(t, rec, "time")
		assert.Contains(t, rec, "level")
		msgs = append(msgs, rec["msg"].(string))
	}
	return msgs
}

func TestCLILogFormatJSON(t *testing.T) {
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "disk.raw", 1<<20, 4)
	code, _, stderr := runCLI(t, nil, env(nil), "-v", "--log-format", "json", src, filepath.Join(dir, "out.img"))
	require.Equal(t, cdi.ExitOK, code)
	assert.Contains(t, jsonLogLines(t, stderr), "New phase: TransferDataFile")
}

func TestEnvLogFormatJSON(t *testing.T) {
	dir := t.TempDir()
	testimg.Raw(t, dir, "disk.raw", 1<<20, 5)
	base := testimg.Serve(t, dir)
	root := cdiRoot(t)
	code, _, stderr := runCLI(t, nil, env(map[string]string{
		"IMPORTER_SOURCE":         "http",
		"IMPORTER_ENDPOINT":       base + "/disk.raw",
		"IMPORTER_PATH_PREFIX":    root,
		"IMPORTER_METRICS_LISTEN": "off",
		"IMPORTER_LOG_FORMAT":     "json",
	}))
	require.Equal(t, cdi.ExitOK, code)
	msgs := jsonLogLines(t, stderr)
	assert.Contains(t, msgs, "New phase: TransferDataFile")
	assert.Contains(t, msgs, "Import complete")
}

func TestBlankLogFormatJSON(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "blank.img")
	code, _, stderr := runCLI(t, nil, env(nil), "blank", "-v", "--log-format", "json", "--size", "1Mi", dest)
	require.Equal(t, cdi.ExitOK, code)
	assert.Contains(t, jsonLogLines(t, stderr), "Blank disk created", "the summary is a JSON record too")
	code, _, _ = runCLI(t, nil, env(nil), "blank", "--log-format", "xml", "--size", "1Mi", dest+"2")
	assert.Equal(t, cdi.ExitUsage, code)
}

// Under --log-format json every line of standard error is JSON: the
// summary is an INFO record with the result's numbers, the failure an
// ERROR record with the error and its reason.
func TestCLILogFormatJSONEndsInRecords(t *testing.T) {
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "disk.raw", 1<<20, 4)
	code, _, stderr := runCLI(t, nil, env(nil), "--log-format", "json", src, filepath.Join(dir, "out.img"))
	require.Equal(t, cdi.ExitOK, code)
	recs := jsonRecords(t, stderr)
	last := recs[len(recs)-1]
	assert.Equal(t, "Import complete", last["msg"])
	assert.Equal(t, "raw", last["sourceFormat"])
	assert.EqualValues(t, 1<<20, last["virtualSize"])
	assert.EqualValues(t, 1<<20, last["bytesRead"])

	code, _, stderr = runCLI(t, nil, env(nil), "--log-format", "json", filepath.Join(dir, "nope.raw"), filepath.Join(dir, "x.img"))
	require.Equal(t, cdi.ExitFailed, code)
	recs = jsonRecords(t, stderr)
	last = recs[len(recs)-1]
	assert.Equal(t, "ERROR", last["level"])
	assert.Equal(t, "import failed", last["msg"])
	assert.Equal(t, "source file "+filepath.Join(dir, "nope.raw")+" does not exist", last["error"])
	assert.Equal(t, "SourceUnreachable", last["reason"])
}

// Under --log-format json the upload server's ending is a record as the
// import's: "Import complete" with the result's numbers after an upload,
// an ERROR with error and reason when it is stopped.
func TestUploadServerLogFormatJSONEndsInRecords(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 1<<20, 4)
	serve := func(ctx context.Context, addr string) (<-chan int, *bytes.Buffer) {
		var stderr bytes.Buffer
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"upload-server", "--log-format", "json", "--listen", addr, filepath.Join(dir, "out.img")},
				nil, io.Discard, &stderr, env(nil))
		}()
		return done, &stderr
	}

	addr := freeAddr(t)
	done, stderr := serve(context.Background(), addr)
	waitHealthy(t, http.DefaultClient, "http://"+addr)
	require.Equal(t, http.StatusOK, uploadFile(t, http.DefaultClient, "http://"+addr+uploadserver.PathUpload, raw, ""))
	require.Equal(t, cdi.ExitOK, waitExit(t, done))
	recs := jsonRecords(t, stderr.String())
	last := recs[len(recs)-1]
	assert.Equal(t, "Import complete", last["msg"])
	assert.Equal(t, "raw", last["sourceFormat"])
	assert.EqualValues(t, 1<<20, last["virtualSize"])
	assert.EqualValues(t, 1<<20, last["bytesRead"])
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, filepath.Join(dir, "out.img"), -1))

	ctx, cancel := context.WithCancel(context.Background())
	addr = freeAddr(t)
	done, stderr = serve(ctx, addr)
	waitHealthy(t, http.DefaultClient, "http://"+addr)
	cancel()
	assert.NotEqual(t, cdi.ExitOK, waitExit(t, done))
	recs = jsonRecords(t, stderr.String())
	last = recs[len(recs)-1]
	assert.Equal(t, "ERROR", last["level"])
	assert.Equal(t, "upload-server", last["msg"])
	assert.NotEmpty(t, last["error"])
	assert.NotEmpty(t, last["reason"])
}

// jsonRecords parses every line of stderr as a JSON log record.
func jsonRecords(t *testing.T, stderr string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &rec), "not a JSON log line: %q", l)
		recs = append(recs, rec)
	}
	return recs
}

// TestFitLineKeepsTheSummaryWithinTheTerminal: a final line longer than
// the terminal is broken after its commas or before " in ", each line
// within the width, nothing lost; a line that fits, or no terminal, is
// left alone (at 80 columns the summary wrapped mid-word).
func TestFitLineKeepsTheSummaryWithinTheTerminal(t *testing.T) {
	s := "Import complete: /var/lib/images/vm1/disk.img, 20.0 GiB, target 30.0 GiB (qcow2.xz, 752.0 MiB read, 1.1 GiB written) in 4.1 s, 183.4 MiB/s read, 274.7 MiB/s written"
	for _, width := range []int{80, 60, 100} {
		got := fitLine(s, width)
		for _, l := range strings.Split(got, "\n") {
			assert.LessOrEqual(t, len(l), width, "%q", l)
		}
		joined := strings.Join(strings.Fields(got), " ")
		assert.Equal(t, strings.Join(strings.Fields(s), " "), joined, "nothing lost")
	}
	assert.Equal(t, s, fitLine(s, 0), "no terminal")
	assert.Equal(t, "short line", fitLine("short line", 80))
	long := strings.Repeat("x", 100)
	assert.Equal(t, long, fitLine(long, 80), "nothing to break at")
}

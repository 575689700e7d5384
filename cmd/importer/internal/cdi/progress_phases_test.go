package cdi

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/internal/testkit/testtar"
)

var phaseGauge = regexp.MustCompile(`^diskimport_phase\{phase="([A-Za-z]+)"\} (\S+)$`)

// phaseGauges scrapes h in process and returns diskimport_phase by phase.
func phaseGauges(t *testing.T, h http.Handler) map[string]string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	got := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(rec.Body.Bytes()))
	for sc.Scan() {
		if m := phaseGauge.FindStringSubmatch(sc.Text()); m != nil {
			got[m[1]] = m[2]
		}
	}
	return got
}

// TestPhaseGaugeFollowsEveryPhaseOfEveryRoute: imports that take every
// route (stream, clone with Verify, convert in place, scratch then
// convert, archive, delta pass, a refused source) are followed by the
// tracker; at each of the engine's snapshots diskimport_phase is 1 for the
// phase the import is in and 0 for every other, and together the routes
// pass every phase. With the phases listed by hand, the gauge read 0
// everywhere through TransferDelta, Verify and Commit.
func TestPhaseGaugeFollowsEveryPhaseOfEveryRoute(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw, qcow := testimg.RawAndQCOW2(t, dir, 4<<20, 61)
	copyOfRaw := filepath.Join(dir, "copy.img")
	rawBytes, err := os.ReadFile(raw)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(copyOfRaw, rawBytes, 0o600))
	text := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(text, []byte(strings.Repeat("not a disk image\n", 4096)), 0o600))
	qcowBytes, err := os.ReadFile(qcow)
	require.NoError(t, err)
	tarFile := testtar.Write(t, dir, "files.tar", testtar.Sample())

	seen := map[importer.Phase]bool{}
	for _, c := range []struct {
		name string
		opts importer.Options
		fail bool
	}{
		{"stream", importer.Options{Source: raw}, false},
		{"clone with verify", withVerify(importer.Options{Source: raw}), false},
		{"convert in place", noStreamDecode(importer.Options{Source: qcow}), false},
		{"scratch then convert", noStreamDecode(importer.Options{Source: "-", SourceReader: bytes.NewReader(qcowBytes)}), false},
		{"archive", importer.Options{Source: tarFile, TargetOptions: importer.TargetOptions{ContentType: "archive"}}, false},
		{"delta pass", importer.Options{Source: raw, Target: copyOfRaw, Delta: true}, false},
		{"refused", importer.Options{Source: text}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := NewProgressTracker()
			h := NewMetricsHandler(tr, "u")
			o := c.opts
			if o.Target == "" {
				o.Target = filepath.Join(t.TempDir(), "disk.img")
				if o.ContentType == "archive" {
					o.Target = t.TempDir()
				}
			}
			o.ScratchDir = t.TempDir()
			o.Logger = testimg.Logger(t)
			o.Progress = func(p importer.Progress) {
				tr.Observe(p)
				gauges := phaseGauges(t, h)
				for _, phase := range importer.Phases() {
					want := "0"
					if phase == p.Phase {
						want = "1"
					}
					assert.Equal(t, want, gauges[string(phase)], "diskimport_phase{phase=%q} while in %s", phase, p.Phase)
				}
				seen[p.Phase] = true
			}
			_, err := importer.Import(context.Background(), o)
			if c.fail {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
		})
	}
	for _, phase := range importer.Phases() {
		assert.True(t, seen[phase], "no route passed %s", phase)
	}
}

func withVerify(o importer.Options) importer.Options {
	o.Verify = true
	return o
}

func noStreamDecode(o importer.Options) importer.Options {
	o.NoStreamDecode = true
	return o
}

package main

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/cdi"
)

// Off a terminal, a slow import prints a progress line every few seconds
// between no other lines, and one final line with human sizes and the
// average speed; the engine's phase lines need -v.
func TestCLIProgressLinesOffTerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 7 s")
	}
	data := bytes.Repeat([]byte("dsk\x00"), 7<<20/4) // 7 MiB at 1 MiB/s, binary (a text body is refused)
	srv := slowServer(t, data, 64<<10, 62*time.Millisecond)
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

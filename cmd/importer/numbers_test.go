package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/internal/units"
)

// finalRate parses the summary's "in S s, R read[, W written]" and returns
// the read rate in bytes per second (to the precision units.Rate prints).
func finalRate(t *testing.T, line string) float64 {
	t.Helper()
	m := regexp.MustCompile(`in [0-9.]+ s, ([0-9.]+) (B|KiB|MiB|GiB|TiB)/s read(, [0-9.]+ (B|KiB|MiB|GiB|TiB)/s written)?$`).FindStringSubmatch(line)
	require.NotNil(t, m, "final line: %q", line)
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v * map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[m[2]]
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// The numbers an import reports are what happened: virtualSize is the
// image's size and targetSize the grown file's; bytesRead is the bytes of
// the source read, never more than its size (a ranged read covers the
// sniffed head again and qemu-img re-reads tables), and on the in-place
// route the local image qemu-img read (its allocated bytes, not the 64 KiB
// sniffed); the final line's rate is bytesRead over the duration, never
// the disk's size over it (with --size 10G a 4 MiB image printed GiB/s).
func TestCLINumbersAreTrue(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	const size = 4 << 20
	raw, q := testimg.RawAndQCOW2(t, dir, size, 61)
	vdi := testimg.Convert(t, raw, filepath.Join(dir, "disk.vdi"), "vdi")
	// Mostly compressed clusters: the route choice reads its tables over
	// ranges before the stream reads them again.
	cq := filepath.Join(dir, "compressed.qcow2")
	testimg.Run(t, "qemu-img", "convert", "-q", "-c", "-f", "raw", "-O", "qcow2", raw, cq)
	ranged := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(ranged.Close)
	allocated := func(p string) int64 {
		st, err := os.Stat(p)
		require.NoError(t, err)
		return min(st.Size(), st.Sys().(*syscall.Stat_t).Blocks*512)
	}
	fileSize := func(p string) int64 {
		st, err := os.Stat(p)
		require.NoError(t, err)
		return st.Size()
	}
	for name, c := range map[string]struct {
		src       string
		args      []string
		read      int64 // bytesRead, exactly
		targetDir bool  // a directory target, grown by --size
	}{
		"raw over HTTP grown to 10 GiB": {src: ranged.URL + "/disk.raw", args: []string{"--size", "10Gi"}, read: size, targetDir: true},
		"qcow2 in place":                {src: q, read: allocated(q)},
		"vdi over HTTP, decoded":        {src: ranged.URL + "/disk.vdi", read: fileSize(vdi)},
		"compressed qcow2 over HTTP":    {src: ranged.URL + "/compressed.qcow2", read: fileSize(cq)},
	} {
		t.Run(name, func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "disk.img")
			target := dest
			if c.targetDir {
				target = filepath.Dir(dest)
			}
			args := append([]string{"--json"}, c.args...)
			code, stdout, stderr := runCLI(t, nil, env(nil), append(args, c.src, target)...)
			require.Equal(t, cdi.ExitOK, code)
			m := decode(t, []byte(stdout))
			assert.EqualValues(t, size, m.VirtualSize, "virtualSize is the image's")
			if c.targetDir {
				// 10 GiB less CDI's default overhead, in whole MiB.
				st, err := os.Stat(dest)
				require.NoError(t, err)
				assert.Greater(t, st.Size(), int64(9<<30))
				assert.Equal(t, st.Size(), m.TargetSize, "targetSize is the grown file's")
			} else {
				assert.EqualValues(t, size, m.TargetSize)
			}
			assert.Equal(t, c.read, m.BytesRead, "bytesRead")
			assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, dest, size))

			line := lastLine(stderr)
			require.Greater(t, m.DurationSeconds, 0.0)
			want := float64(m.BytesRead) / m.DurationSeconds
			got := finalRate(t, line)
			// The line's rate is truncated to one decimal of its unit and
			// the JSON's duration to milliseconds.
			assert.InEpsilon(t, want, got, 0.1, "rate %s in %q, bytesRead/duration %s", units.Rate(got), line, units.Rate(want))
			if c.targetDir {
				assert.Contains(t, line, fmt.Sprintf("%s, target %s", units.Bytes(size), units.Bytes(m.TargetSize)))
				assert.NotRegexp(t, `GiB/s`, line)
			}
		})
	}
}

// Onto a device, virtualSize is the image's and targetSize the device's,
// and the final line names both.
func TestCLIDeviceTargetSizeIsItsOwnField(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 4<<20, 62)
	loop := testimg.LoopDevice(t, dir, 8<<20)
	code, stdout, stderr := runCLI(t, nil, env(nil), "--json", raw, loop)
	require.Equal(t, cdi.ExitOK, code)
	m := decode(t, []byte(stdout))
	assert.EqualValues(t, 4<<20, m.VirtualSize)
	assert.EqualValues(t, 8<<20, m.TargetSize)
	assert.EqualValues(t, 4<<20, m.BytesRead)
	assert.Contains(t, lastLine(stderr), "4.0 MiB, target 8.0 MiB (raw, 4.0 MiB read")
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, loop, 4<<20))
}

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// TestCLIFailureSaysWhatItDidToTheTarget: a failed import's last line on
// stderr says what is left where DEST lies, and --json carries it as
// targetState: nothing written for a source refused in Info, the partial
// copy removed for a file cut mid-transfer, the first MiB zeroed for a
// device (root only). Before, stderr ended with the cause alone.
func TestCLIFailureSaysWhatItDidToTheTarget(t *testing.T) {
	testimg.Need(t, "gzip")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 32<<20, 91)
	gz, err := os.ReadFile(testimg.Compress(t, raw, "gz"))
	require.NoError(t, err)
	cut := filepath.Join(dir, "cut.raw.gz") // gzip writes as it inflates: 3/4 is MiBs written
	require.NoError(t, os.WriteFile(cut, gz[:len(gz)*3/4], 0o600))
	text := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(text, bytes.Repeat([]byte("some notes\n"), 100), 0o600))
	cases := []struct {
		name, source, dest, state, words string
	}{
		{"refused", text, filepath.Join(t.TempDir(), "disk.img"), importer.TargetUntouched, "nothing was written to "},
		{"cut", cut, filepath.Join(t.TempDir(), "disk.img"), importer.TargetRemoved, " is as it was: the partial copy beside it was removed"},
	}
	if loop := testimg.LoopDeviceIfRoot(t, t.TempDir(), 40<<20); loop != "" {
		cases = append(cases, struct{ name, source, dest, state, words string }{
			"device", cut, loop, importer.TargetWiped, loop + " was written in part and its first MiB zeroed: it holds no usable image"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, nil, env(nil), "--json", c.source, c.dest)
			assert.Equal(t, cdi.ExitFailed, code)
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			last := lines[len(lines)-1]
			assert.Contains(t, last, c.words, "the final line says what was left")
			assert.Contains(t, last, c.dest)
			assert.Equal(t, c.state, decode(t, []byte(stdout)).TargetState)
		})
	}
}

// TestCLISparseImageBeyondFreeSpaceNamesOvercommit: a sparse image larger
// than a file DEST's free space is refused, and the refusal names the flag
// that writes it anyway; one larger than --size (which binds before free
// space) does not, since overcommit cannot help there. Before, neither
// named it.
func TestCLISparseImageBeyondFreeSpaceNamesOvercommit(t *testing.T) {
	testimg.Need(t, "qemu-img")
	big := filepath.Join(t.TempDir(), "big.qcow2")
	testimg.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", big, "50T") // past any disk here, within the 64 TiB bound
	dest := filepath.Join(t.TempDir(), "disk.img")
	code, _, stderr := runCLI(t, nil, env(nil), big, dest)
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "or --allow-sparse-overcommit writes the sparse image anyway")

	code, _, stderr = runCLI(t, nil, env(nil), "--size", "1Gi", big, dest)
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "a larger volume is required")
	assert.NotContains(t, stderr, "--allow-sparse-overcommit")
}

// TestCLIQcow2TargetImportIsQuiet: a clean import onto a qcow2 file warns
// of nothing (it warned "No content digest of the image written", though
// a qcow2 target never has one and none was asked for).
func TestCLIQcow2TargetImportIsQuiet(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	_, qcow := testimg.RawAndQCOW2(t, dir, 4<<20, 92)
	dest := filepath.Join(t.TempDir(), "disk.qcow2")
	code, _, stderr := runCLI(t, nil, env(nil), "--format", "qcow2", qcow, dest)
	require.Equal(t, cdi.ExitOK, code)
	assert.NotContains(t, stderr, "WARN")
	assert.Contains(t, stderr, "Import complete: "+dest)
}

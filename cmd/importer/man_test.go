package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/cdi"
)

// `importer man DIR` (make man) writes a page per command from the cobra
// commands.
func TestManPages(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "man1")
	code, _, _ := runCLI(t, nil, env(nil), "man", dir)
	require.Equal(t, cdi.ExitOK, code)
	for _, page := range []string{"importer.1", "importer-inspect.1", "importer-blank.1", "importer-version.1"} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		require.NoError(t, err, page)
		assert.True(t, strings.HasPrefix(string(b), ".nh\n.TH \"IMPORTER\" \"1\""), page)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "importer.1"))
	assert.Contains(t, string(b), `\fB--cache-mode\fP`)
}

// Shell completion offers the values of the flags that take a few words.
func TestCompletionOffersFlagValues(t *testing.T) {
	for flag, want := range map[string][]string{
		"--format":       {"raw", "qcow2"},
		"--cache-mode":   {"none", "writeback", "trynone"},
		"--content-type": {"kubevirt", "archive", "as-is"},
		"--log-format":   {"text", "json"},
	} {
		code, stdout, _ := runCLI(t, nil, env(nil), "__complete", flag, "")
		require.Equal(t, cdi.ExitOK, code)
		assert.Equal(t, append(want, ":4"), strings.Split(strings.TrimSpace(stdout), "\n"), flag)
	}
	_, stdout, _ := runCLI(t, nil, env(nil), "__complete", "inspect", "--format", "")
	assert.Contains(t, stdout, "qcow2")
	_, stdout, _ = runCLI(t, nil, env(nil), "completion", "bash")
	assert.Contains(t, stdout, "bash completion")
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
)

// docs/cli is what `importer docs` makes of the commands today: a flag,
// a subcommand or a help text changed without `make docs` fails here, so
// the reference cannot drift from --help.
func TestCLIReferenceIsGenerated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cli")
	code, _, stderr := runCLI(t, nil, env(nil), "docs", dir)
	require.Equal(t, cdi.ExitOK, code, stderr)
	committed := filepath.Join("..", "..", cliDocsDir)
	want := readTree(t, dir)
	got := readTree(t, committed)
	require.Contains(t, want, "importer.md")
	for name, page := range want {
		assert.Equal(t, page, got[name], "%s/%s differs from what the commands say: run make docs", cliDocsDir, name)
	}
	for name := range got {
		_, ok := want[name]
		assert.True(t, ok, "%s/%s documents no command: run make docs", cliDocsDir, name)
	}
	// The reference names the flags as --help does, hidden commands aside.
	assert.Contains(t, want["importer.md"], "--cache-mode")
	assert.NotContains(t, want, "importer_docs.md")
	assert.NotContains(t, want, "importer_man.md")
}

// readTree returns the files of dir by name.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	files := make(map[string]string, len(entries))
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".md") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		files[e.Name()] = string(b)
	}
	return files
}

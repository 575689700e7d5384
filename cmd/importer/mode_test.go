package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/internal/cdi"
	"github.com/diskimport/engine/internal/testimg"
)

// A new DEST file gets what the umask allows of 0666, or --mode.
func TestCLIFileModeFollowsUmask(t *testing.T) {
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "disk.raw", 1<<20, 3)
	old := unix.Umask(0o027)
	t.Cleanup(func() { unix.Umask(old) })

	mode := func(args ...string) os.FileMode {
		dest := filepath.Join(t.TempDir(), "disk.img")
		code, _, _ := runCLI(t, nil, env(nil), append(args, src, dest)...)
		require.Equal(t, cdi.ExitOK, code)
		st, err := os.Stat(dest)
		require.NoError(t, err)
		return st.Mode().Perm()
	}
	assert.Equal(t, os.FileMode(0o640), mode())
	assert.Equal(t, os.FileMode(0o600), mode("--mode", "0600"))
	unix.Umask(0o002)
	assert.Equal(t, os.FileMode(0o664), mode())

	code, _, stderr := runCLI(t, nil, env(nil), "--mode", "rw", src, filepath.Join(dir, "x.img"))
	assert.Equal(t, cdi.ExitUsage, code)
	assert.Contains(t, stderr, "--mode")
}

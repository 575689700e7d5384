package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Ctrl-C (SIGINT) in the middle of a slow download: exit 130, nothing left
// behind.
func TestBinarySIGINTExits130(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := buildImporter(t, dir)
	srv := slowServer(t, bytes.Repeat([]byte{7}, 16<<20), 64<<10, 50*time.Millisecond)
	destDir := t.TempDir()
	var stderr bytes.Buffer
	cmd := exec.Command(bin, srv.URL+"/disk.img", filepath.Join(destDir, "disk.img"))
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill() })
	time.Sleep(time.Second)
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	err := cmd.Wait()
	t.Logf("stderr: %s", stderr.String())
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, exitInterrupted, ee.ExitCode())
	assert.Contains(t, stderr.String(), "cancelled")
	ents, _ := os.ReadDir(destDir)
	assert.Empty(t, ents, "target files left")
}

func TestInterruptedCode(t *testing.T) {
	assert.Equal(t, 130, interruptedCode(1, true, os.Interrupt))
	assert.Equal(t, 143, interruptedCode(1, true, syscall.SIGTERM))
	assert.Equal(t, 0, interruptedCode(0, true, syscall.SIGTERM), "CDI's scratch-space-required result stays 0")
	assert.Equal(t, 0, interruptedCode(0, true, os.Interrupt), "finished before the signal landed")
	assert.Equal(t, 1, interruptedCode(1, false, nil))
}

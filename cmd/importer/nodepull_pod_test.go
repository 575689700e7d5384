package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/cdi"
	"github.com/diskimport/engine/internal/testimg"
)

// serverBinary builds cmd/cdi-containerimage-server once, static as the
// containerdisk image needs it.
var serverBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "cisbin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "server")
	cmd := exec.Command("go", "build", "-o", bin, "../cdi-containerimage-server")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// nodePullEnv is the importer's environment in a node-pull pod, as CDI's
// controller sets it (the sidecar listens on localhost:port).
func nodePullEnv(port string, extra map[string]string) map[string]string {
	env := httpEnv("http://localhost:"+port+"/disk.img", map[string]string{
		"IMPORTER_PULL_METHOD": "node",
		"IMPORTER_READY_FILE":  "/shared/ready",
		"IMPORTER_DONE_FILE":   "/shared/done",
	})
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// A registry import by node pull: the importer waits for the sidecar (our
// server program, started late), imports the file the ready file names by
// ranges (no /scratch in the pod), labels the volume from the sidecar's
// environment and creates the done file, on which the sidecar exits.
func TestPodNodePull(t *testing.T) {
	testimg.Need(t, "qemu-img")
	srvBin, err := serverBinary()
	require.NoError(t, err)
	work := t.TempDir()
	raw := testimg.Raw(t, work, "disk.raw", 4<<20, 66)
	imageDir := filepath.Join(work, "disk")
	require.NoError(t, os.Mkdir(imageDir, 0o755))
	testimg.Convert(t, raw, filepath.Join(imageDir, "fedora-41.qcow2"), "qcow2")
	shared, data := t.TempDir(), t.TempDir()
	port := freePort(t)

	rp := startPod(t, pod{env: nodePullEnv(port, nil), volumes: map[string]string{"/data": data, "/shared": shared}})
	time.Sleep(2 * time.Second) // the sidecar's image is still being pulled
	select {
	case <-rp.done:
		t.Fatalf("the importer did not wait for the ready file:\n%s", rp.stderr.String())
	default:
	}
	sidecar := exec.Command(srvBin, "-p", port, "-image-dir", imageDir,
		"-ready-file", filepath.Join(shared, "ready"), "-done-file", filepath.Join(shared, "done"))
	sidecar.Env = []string{"PATH=/bin", "INSTANCETYPE_KUBEVIRT_IO_DEFAULT_INSTANCETYPE=u1.small", "KUBEVIRT_IO_OS=fedora", "OTHER=x"}
	sideOut := &syncBuffer{}
	sidecar.Stdout, sidecar.Stderr = sideOut, sideOut
	sidecar.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, sidecar.Start())
	sideDone := make(chan struct{})
	var sideErr error
	go func() { sideErr = sidecar.Wait(); close(sideDone) }()
	t.Cleanup(func() {
		sidecar.Process.Kill()
		<-sideDone
	})

	require.Equal(t, cdi.ExitOK, rp.wait(t))
	m := decode(t, rp.terminationLog(t))
	assert.Equal(t, "Import Complete", m.Message)
	assert.Equal(t, map[string]string{
		"instancetype.kubevirt.io/default-instancetype": "u1.small",
		"kubevirt.io/os": "fedora",
	}, m.Labels)
	assert.False(t, m.ScratchUsed, "read by ranges, never staged")
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, filepath.Join(data, "disk.img"), 4<<20))
	select {
	case <-sideDone:
		assert.NoError(t, sideErr, "the sidecar exits cleanly once the done file is there:\n%s", sideOut.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("the sidecar still runs 10 s after the import:\n%s", sideOut.String())
	}
}

// Without a sidecar the importer gives up as CDI's does.
func TestPodNodePullReadyFileTimeout(t *testing.T) {
	data := t.TempDir()
	start := time.Now()
	code, log, _ := runPod(t, pod{
		env:     nodePullEnv(freePort(t), map[string]string{"IMPORTER_READY_FILE_TIMEOUT": "2s"}),
		volumes: map[string]string{"/data": data, "/shared": t.TempDir()},
	})
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Equal(t, "Timeout waiting for file /shared/ready", failureText(t, log))
	assert.GreaterOrEqual(t, time.Since(start), 2*time.Second)
	assert.Empty(t, dirEntries(t, data))
}

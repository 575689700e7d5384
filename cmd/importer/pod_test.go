package main

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// pod is an importer container as CDI's controller makes one: its
// environment and nothing else, and its volumes at CDI's fixed paths.
// runPod runs the real binary that way: in a private mount namespace, in
// a root of its own (a tmpfs holding the host's system directories, a
// /dev of a few device nodes, an empty /tmp), so /data, /scratch and
// /dev/termination-log are the real paths, with no IMPORTER_PATH_PREFIX.
type pod struct {
	env map[string]string
	// volumes maps a path in the pod to the host file, directory or device
	// mounted there (/data, /scratch, /dev/cdi-block-volume, /certs, ...).
	volumes map[string]string
	// dirs are directories of the pod's own root file system, made there
	// and not mounted (as an image ships /scratch).
	dirs []string
}

// runningPod is a started pod.
type runningPod struct {
	cmd     *exec.Cmd
	stderr  *syncBuffer
	termLog string // the host file bound at /dev/termination-log
	done    chan struct{}
	code    int
}

// podBinary builds the importer once per test binary.
var podBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "podbin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "importer")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// needPods skips a test that cannot make a pod (not root, no unshare).
func needPods(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if os.Geteuid() != 0 {
		t.Skip("a pod's mount namespace needs root")
	}
	testimg.Need(t, "unshare", "chroot", "mount")
	// Root in a container without CAP_SYS_ADMIN cannot make one either.
	if out, err := exec.Command("unshare", "--mount", "--propagation", "private", "mount", "-t", "tmpfs", "probe", "/mnt").CombinedOutput(); err != nil {
		t.Skipf("cannot make a private mount namespace here: %v %s", err, out)
	}
	bin, err := podBinary()
	require.NoError(t, err)
	return bin
}

// startPod starts p; the test's cleanup kills it if it still runs.
func startPod(t *testing.T, p pod) *runningPod {
	t.Helper()
	bin := needPods(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	require.NoError(t, os.Mkdir(root, 0o755))
	termLog := filepath.Join(dir, "termination-log")
	require.NoError(t, os.WriteFile(termLog, nil, 0o600))
	vols := map[string]string{"/importer": bin, "/dev/termination-log": termLog}
	for in, host := range p.volumes {
		vols[in] = host
	}
	// Parents before children (/shared before /shared/x).
	paths := make([]string, 0, len(vols))
	for in := range vols {
		paths = append(paths, in)
	}
	sort.Strings(paths)
	args := []string{"--mount", "--propagation", "private", "sh", "-c", testimg.PodScript, "pod", root, strconv.Itoa(len(p.dirs))}
	args = append(args, p.dirs...)
	for _, in := range paths {
		args = append(args, in, vols[in])
	}
	cmd := exec.Command("unshare", args...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for k, v := range p.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	rp := &runningPod{cmd: cmd, stderr: &syncBuffer{}, termLog: termLog, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = rp.stderr, rp.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	go func() {
		defer close(rp.done)
		err := cmd.Wait()
		rp.code = cmd.ProcessState.ExitCode()
		if err != nil && rp.code < 0 {
			rp.code = 128 + int(cmd.ProcessState.Sys().(syscall.WaitStatus).Signal())
		}
	}()
	t.Cleanup(func() {
		select {
		case <-rp.done:
		default:
			cmd.Process.Kill()
			<-rp.done
		}
	})
	return rp
}

// wait waits for the pod to exit and returns its exit code.
func (rp *runningPod) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-rp.done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the pod did not exit in 3 minutes; output:\n%s", rp.stderr.String())
	}
	t.Logf("pod exited %d; output:\n%s", rp.code, rp.stderr.String())
	return rp.code
}

// terminationLog is what the pod left in /dev/termination-log.
func (rp *runningPod) terminationLog(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(rp.termLog)
	require.NoError(t, err)
	return b
}

// runPod runs p to its end.
func runPod(t *testing.T, p pod) (code int, termLog []byte, output string) {
	t.Helper()
	rp := startPod(t, p)
	code = rp.wait(t)
	return code, rp.terminationLog(t), rp.stderr.String()
}

// syncBuffer is a bytes.Buffer the pod writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// httpEnv is the environment CDI's controller gives an HTTP import pod.
func httpEnv(endpoint string, extra map[string]string) map[string]string {
	env := map[string]string{
		"IMPORTER_SOURCE":      "http",
		"IMPORTER_ENDPOINT":    endpoint,
		"IMPORTER_CONTENTTYPE": "kubevirt",
		"IMPORTER_IMAGE_SIZE":  "64Mi",
		"OWNER_UID":            "b856691e-1038-11e9-a5ab-525500d15501",
		"FILESYSTEM_OVERHEAD":  "0.055",
		"PREALLOCATION":        "false",
		// Other tests' pods may run at once: not the pod's real :8443.
		"IMPORTER_METRICS_LISTEN": "off",
	}
	maps.Copy(env, extra)
	return env
}

// assertFirstLine checks that the first line of a pod's log contains want.
func assertFirstLine(t *testing.T, log, want string) {
	t.Helper()
	first, _, _ := strings.Cut(log, "\n")
	assert.Contains(t, first, want, "first log line; whole log:\n%s", log)
}

// Started with only CDI's -v=N, the importer's environment makes it the
// importer, and the first log line says so.
func TestPodRoleImporterFirstLogLine(t *testing.T) {
	root := cdiRoot(t)
	code, _, stderr := runCLI(t, nil, env(map[string]string{
		"IMPORTER_SOURCE": "none", "IMPORTER_IMAGE_SIZE": "1Mi", "PREALLOCATION": "false",
		"IMPORTER_PATH_PREFIX": root, "IMPORTER_METRICS_LISTEN": "off",
	}), "-v=1")
	assert.Equal(t, cdi.ExitOK, code, stderr)
	assertFirstLine(t, stderr, `msg="Running as CDI's importer pod" role=importer chosenBy=IMPORTER_SOURCE`)
}

// Two pods' variables in one environment are refused before anything
// runs, naming both.
func TestPodRoleRefusesAmbiguousEnvironment(t *testing.T) {
	code, _, stderr := runCLI(t, nil, env(map[string]string{
		"IMPORTER_SOURCE": "http", "IMPORTER_ENDPOINT": "http://127.0.0.1:1/disk.img",
		"TLS_CERT_FILE": "/certs/tls.crt", "TLS_KEY_FILE": "/certs/tls.key",
	}), "-v=1")
	assert.Equal(t, cdi.ExitUsage, code)
	assert.Contains(t, stderr, "more than one of CDI's pods: importer (IMPORTER_SOURCE) and upload-server (TLS_CERT_FILE, TLS_KEY_FILE)")
	assert.NotContains(t, stderr, "Running as", "no role is taken")
}

// CDI's controller mounts no /scratch for an HTTP import. A compressed
// monolithicSparse vmdk needs it (it has no grain markers to stream by; a
// compressed qcow2, streamOptimized vmdk, dynamic VHD, VDI or VHDX is
// decoded straight onto the volume), so the first pod must write nothing
// to the volume and exit 0 with scratchSpaceRequired; the controller then
// adds a scratch volume and recreates the pod, which completes. A
// /scratch that is a directory of the pod's own root file system, not a
// mounted volume, counts as none.
func TestPodScratchSpaceHandshake(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 4<<20, 61)
	q := testimg.Convert(t, raw, filepath.Join(dir, "disk.vmdk"), "vmdk", "subformat=monolithicSparse")
	xz := testimg.Compress(t, q, "xz")
	base := testimg.Serve(t, dir)
	data := t.TempDir()
	env := httpEnv(base+filepath.Base(xz), nil)

	code, log, out := runPod(t, pod{env: env, volumes: map[string]string{"/data": data}})
	require.Equal(t, cdi.ExitOK, code, "scratch required exits 0, or the kubelet restarts the same pod")
	m := decode(t, log)
	assert.True(t, m.ScratchSpaceRequired, "%s", log)
	assert.Contains(t, out, "Scratch space required")
	assert.Contains(t, out, "xz-compressed", "the log says why scratch is needed")
	assert.Empty(t, testimg.DirNames(t, data), "nothing may reach the volume before scratch space is there")

	code, log, out = runPod(t, pod{env: env, volumes: map[string]string{"/data": data}, dirs: []string{"/scratch"}})
	require.Equal(t, cdi.ExitOK, code)
	assert.True(t, decode(t, log).ScratchSpaceRequired, "a /scratch that is no mount point is the container's own layer: %s", log)
	assert.Contains(t, out, "No scratch volume mounted at /scratch")
	assert.Empty(t, testimg.DirNames(t, data))

	scratch := t.TempDir()
	code, log, _ = runPod(t, pod{env: env, volumes: map[string]string{"/data": data, "/scratch": scratch}})
	require.Equal(t, cdi.ExitOK, code)
	m = decode(t, log)
	assert.False(t, m.ScratchSpaceRequired)
	assert.Equal(t, "Import Complete", m.Message)
	assert.True(t, m.ScratchUsed)
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, filepath.Join(data, "disk.img"), 4<<20))
	assert.Empty(t, testimg.DirNames(t, scratch), "scratch not cleaned")
}

// A failed import leaves CDI's plain text in the termination log (the
// controller parses JSON only after exit 0) and exits 1.
func TestPodFailureLeavesText(t *testing.T) {
	base := testimg.Serve(t, t.TempDir())
	data := t.TempDir()
	code, log, _ := runPod(t, pod{
		env:     httpEnv(base+"missing.img", nil),
		volumes: map[string]string{"/data": data, "/scratch": t.TempDir()},
	})
	assert.Equal(t, cdi.ExitFailed, code)
	text := failureText(t, log)
	assert.Equal(t, "Unable to process data: expected status code 200, got 404. Status: 404 Not Found (GET "+base+"missing.img)", text,
		"env mode keeps CDI's words, which its controller shows")
	assert.Empty(t, testimg.DirNames(t, data))
}

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
	maps.Copy(env, extra)
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
	case <-time.After(time.Minute): // it ends as soon as it sees the done file
		t.Fatalf("the sidecar still runs a minute after the import:\n%s", sideOut.String())
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
	// A lower bound on a real process (no slowness can fail it); the wait's
	// exact timeouts are the cdi package's synctest tests.
	assert.GreaterOrEqual(t, time.Since(start), 2*time.Second)
	assert.Empty(t, testimg.DirNames(t, data))
}

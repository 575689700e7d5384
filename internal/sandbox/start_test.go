package sandbox

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// parentEnv turns this test binary into a parent that starts `sleep 600`
// through Start, prints its pid and waits to be killed.
const parentEnv = "SANDBOX_TEST_PARENT_OF_SLEEP"

func TestMain(m *testing.M) {
	if sleep, ok := os.LookupEnv(parentEnv); ok {
		c, err := Start(context.Background(), &Policy{Program: sleep, Args: []string{"600"}}, Stdio{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(c.Pid())
		_ = c.Wait()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// gone reports whether pid has exited: no such process, or a zombie
// (nothing reaps orphans in some containers).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && (fields[0] == "Z" || fields[0] == "X")
}

// waitGone waits until pid has exited; it returns as soon as it has (a
// real process, on real time), so its minute is only for one that lives
// on.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !gone(pid) {
		require.True(t, time.Now().Before(deadline), "process %d still runs", pid)
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPipeFilterOpensNoFile(t *testing.T) {
	if ABI() == 0 {
		t.Skip("the kernel has no Landlock")
	}
	sh := program(t, "sh")
	secret := t.TempDir() + "/secret"
	require.NoError(t, os.WriteFile(secret, []byte("not for a decompressor\n"), 0o600))
	// The shell's own redirection opens the file: no exec involved.
	script := `read -r line; echo "in: $line"; read -r s < ` + secret + ` && echo "read: $s"`
	out, stderr, err := runWithInput(t, PipeFilter(sh, []string{"-c", script}, nil), "piped\n")
	require.Error(t, err)
	assert.Equal(t, "in: piped\n", out, "stdin and stdout work")
	assert.Contains(t, stderr, "Permission denied")

	// Unconfined, the same script reads it: the denial is the sandbox's.
	p := PipeFilter(sh, []string{"-c", script}, nil)
	p.Landlock = false
	out, stderr, err = runWithInput(t, p, "piped\n")
	require.NoError(t, err, stderr)
	assert.Equal(t, "in: piped\nread: not for a decompressor\n", out)

	// Nor can it run another program, though it could read its own.
	cat := program(t, "cat")
	_, stderr, err = runWithInput(t, PipeFilter(sh, []string{"-c", "exec " + cat + " /etc/hostname"}, nil), "")
	require.Error(t, err)
	assert.Contains(t, stderr, "Permission denied")
}

func TestChildDiesWithItsParent(t *testing.T) {
	sleep := program(t, "sleep")
	self, err := os.Executable()
	require.NoError(t, err)
	parent := exec.Command(self)
	parent.Env = append(os.Environ(), parentEnv+"="+sleep)
	out, err := parent.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, parent.Start())
	t.Cleanup(func() { _ = parent.Process.Kill(); _ = parent.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	child, err := strconv.Atoi(strings.TrimSpace(line))
	require.NoError(t, err)
	require.False(t, gone(child), "the child runs while its parent does")
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })

	require.NoError(t, parent.Process.Signal(syscall.SIGKILL))
	waitGone(t, child)
}

func TestChildGroupKilledWhenContextEnds(t *testing.T) {
	sh := program(t, "sh")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	// The shell starts a grandchild and prints its pid.
	c, err := Start(ctx, &Policy{Program: sh, Args: []string{"-c", "sleep 600 & echo $!; wait"}}, Stdio{Stdout: w})
	w.Close()
	require.NoError(t, err)
	line, err := bufio.NewReader(r).ReadString('\n')
	require.NoError(t, err)
	grandchild, err := strconv.Atoi(strings.TrimSpace(line))
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(grandchild, syscall.SIGKILL) })

	pgid, err := syscall.Getpgid(c.Pid())
	require.NoError(t, err)
	assert.Equal(t, c.Pid(), pgid, "the child leads a process group of its own")
	own, err := syscall.Getpgid(0)
	require.NoError(t, err)
	assert.NotEqual(t, own, pgid)
	gpgid, err := syscall.Getpgid(grandchild)
	require.NoError(t, err)
	assert.Equal(t, pgid, gpgid, "what it starts is in its group")

	cancel()
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal())
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after the context ended")
	}
	assert.True(t, c.Reaped())
	assert.True(t, gone(c.Pid()), "the child is reaped")
	waitGone(t, grandchild)
	require.NoError(t, c.Kill(), "Kill after the reap does nothing")
}

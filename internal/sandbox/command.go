package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// selfExe is the running binary as the kernel sees it: unlike the path
// os.Executable returns, it still works when the file was replaced or
// deleted since we started (an upgrade in place).
const selfExe = "/proc/self/exe"

// waitDelay bounds how long Wait waits for the standard streams once the
// program has exited or been killed, should something outside its process
// group still hold them.
const waitDelay = 5 * time.Second

// Stdio are a program's standard streams; nil is /dev/null. An *os.File
// is handed to the program as is, anything else through a pipe that a
// goroutine copies (as with os/exec).
type Stdio struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Extra are the program's descriptors 3, 4, … (a decoder's shared
	// memory and its control pipe), handed to it as they are.
	Extra []*os.File
}

// Child is a program started by Start.
type Child struct {
	cmd *exec.Cmd

	mu     sync.Mutex
	reaped bool
}

// Start starts p.Program confined by p, the only way the engine starts a
// program. The program
//   - runs in a process group of its own, so that killing the group ends
//     whatever it may have spawned;
//   - gets SIGKILL when this process dies, however it dies (Pdeathsig,
//     which the launcher's exec keeps). The kernel sends it when the
//     thread that forked ends: Go ends a thread only when a goroutine that
//     locked it returns still locked, which the engine never does;
//   - is killed, its whole group with SIGKILL, when ctx ends;
//   - has p.Env as its whole environment.
func Start(ctx context.Context, p *Policy, stdio Stdio) (*Child, error) {
	enc, err := p.encode()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s not started: %w", p.Program, err)
	}
	exe := selfExe
	if _, err := os.Stat(selfExe); err != nil {
		// No /proc (an unusual container): the path we were started from.
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("finding our own executable to start the sandbox: %w", err)
		}
	}
	c := &Child{}
	cmd := exec.CommandContext(ctx, exe)
	// argv[0] names what the launcher is for in ps; it becomes the
	// program's own argv after exec.
	cmd.Args = []string{"diskimport-sandbox " + p.Program}
	cmd.Env = []string{policyEnv + "=" + enc}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdio.Stdin, stdio.Stdout, stdio.Stderr
	cmd.ExtraFiles = stdio.Extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = c.Kill
	cmd.WaitDelay = waitDelay
	c.cmd = cmd
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", p.Program, err)
	}
	return c, nil
}

// Pid is the program's process id, which is also its process group's.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Wait waits for the program to exit and its output to be copied. A
// program that failed gives an *exec.ExitError; one killed because ctx
// ended gives that ExitError too (the caller asks ctx why).
func (c *Child) Wait() error {
	err := c.cmd.Wait()
	c.mu.Lock()
	c.reaped = true
	c.mu.Unlock()
	return err
}

// Kill sends SIGKILL to the program's process group. It does nothing once
// Wait has reaped the program: the group's id may then be another's.
func (c *Child) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reaped {
		return nil
	}
	// The same check through the pidfd: the program's pid, its group's id,
	// is not another's while the program is unreaped.
	if err := c.cmd.Process.Signal(syscall.Signal(0)); errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	// Negative pid: the whole process group.
	if err := syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing %s: %w", c.cmd.Path, err)
	}
	return nil
}

// Reaped reports whether Wait has returned.
func (c *Child) Reaped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reaped
}

// ExitCode is the program's exit status once it has been reaped; -1 when
// a signal ended it or it has not been reaped.
func (c *Child) ExitCode() int {
	if c.cmd.ProcessState == nil {
		return -1
	}
	return c.cmd.ProcessState.ExitCode()
}

// SetupError reports whether stderr is that of a launcher that failed to
// set up the sandbox (exit status ChildFailedExit), and its message.
func SetupError(exitCode int, stderr string) (string, bool) {
	if exitCode != ChildFailedExit {
		return "", false
	}
	msg, ok := strings.CutPrefix(strings.TrimSpace(stderr), childErrorPrefix)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("setting up the sandbox failed: %s", msg), true
}

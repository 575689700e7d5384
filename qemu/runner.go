package qemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Runner runs qemu-img under prlimit. The zero value is usable.
type Runner struct {
	QemuImg string // qemu-img binary; default "qemu-img"
	// Prlimit is the util-linux prlimit binary; default "prlimit". If it
	// cannot be found every call fails: qemu-img is never run without limits.
	Prlimit string
	// Limits overrides the per-subcommand defaults field by field (a zero
	// field keeps the default). See limits.go for the defaults and why.
	Limits Limits
	// InfoTimeout is the wall-clock limit for info and check; default 30s.
	InfoTimeout time.Duration
	Logger      *slog.Logger
}

func (r *Runner) logger() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.Default()
}

func (r *Runner) infoTimeout() time.Duration {
	if r.InfoTimeout > 0 {
		return r.InfoTimeout
	}
	return DefaultInfoTimeout
}

// lookPaths resolves both binaries so that a missing prlimit is reported as
// such instead of as a confusing exec error.
func (r *Runner) lookPaths() (prlimit, qemuImg string, err error) {
	p := r.Prlimit
	if p == "" {
		p = "prlimit"
	}
	q := r.QemuImg
	if q == "" {
		q = "qemu-img"
	}
	if prlimit, err = exec.LookPath(p); err != nil {
		return "", "", fmt.Errorf("prlimit (%q) not found, refusing to run qemu-img without resource limits: %w", p, err)
	}
	if qemuImg, err = exec.LookPath(q); err != nil {
		return "", "", fmt.Errorf("qemu-img (%q) not found: %w", q, err)
	}
	return prlimit, qemuImg, nil
}

// stderrKeep bounds what we keep of qemu-img's stderr from each end: the
// first lines say what failed, the last ones how it ended, and a corrupt
// image can make check print thousands of lines.
const stderrKeep = 1024

// headTailBuffer keeps the first and the last stderrKeep bytes written.
type headTailBuffer struct {
	head, tail []byte
	dropped    int64
}

func (b *headTailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := stderrKeep - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	b.tail = append(b.tail, p...)
	if over := len(b.tail) - stderrKeep; over > 0 {
		b.dropped += int64(over)
		b.tail = append(b.tail[:0], b.tail[over:]...)
	}
	return n, nil
}

func (b *headTailBuffer) String() string {
	if b.dropped == 0 {
		return strings.TrimSpace(string(b.head) + string(b.tail))
	}
	return strings.TrimSpace(fmt.Sprintf("%s\n[... %d bytes omitted ...]\n%s", b.head, b.dropped, b.tail))
}

// runSpec describes one qemu-img invocation.
type runSpec struct {
	sub    string   // subcommand, for messages
	args   []string // arguments after "qemu-img"
	limits Limits   // already merged with defaults
	stdout io.Writer
}

// runResult carries what callers need to interpret a failure.
type runResult struct {
	stderr   string
	exitCode int // qemu-img's exit status; -1 if it did not exit normally
}

// run executes qemu-img under prlimit. The returned error already names the
// subcommand and includes stderr; res.stderr lets callers look for specific
// messages (e.g. unsupported preallocation) to decide on a retry.
func (r *Runner) run(ctx context.Context, s runSpec) (runResult, error) {
	prlimit, qemuImg, err := r.lookPaths()
	if err != nil {
		return runResult{}, fmt.Errorf("qemu-img %s: %w", s.sub, err)
	}
	if err := ctx.Err(); err != nil {
		return runResult{}, fmt.Errorf("qemu-img %s not started: %w", s.sub, err)
	}
	argv := []string{
		"--as=" + strconv.FormatUint(s.limits.AddressSpace, 10),
		"--cpu=" + strconv.FormatUint(s.limits.CPUSeconds, 10),
		"--", qemuImg,
	}
	argv = append(argv, s.args...)
	cmd := exec.Command(prlimit, argv...)
	// C locale keeps qemu-img's messages stable for the string matching
	// below; the fixed arena count keeps the address-space need independent
	// of the core count (see doc.go).
	cmd.Env = append(os.Environ(), "LC_ALL=C", "MALLOC_ARENA_MAX=2")
	// Own process group, so a cancel kills qemu-img and anything it spawned;
	// Pdeathsig, so it dies with us even if we are killed without a chance
	// to clean up (prlimit execs qemu-img in place, keeping the setting).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stderr := &headTailBuffer{}
	cmd.Stderr = stderr
	// Do not hang in Wait if something outside the group holds our pipes.
	cmd.WaitDelay = 5 * time.Second
	if s.stdout != nil {
		cmd.Stdout = s.stdout
	}

	log := r.logger().With("subcommand", s.sub)
	log.Debug("running qemu-img", "args", s.args, "as", s.limits.AddressSpace, "cpu", s.limits.CPUSeconds)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return runResult{}, fmt.Errorf("qemu-img %s: start: %w", s.sub, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	var waitErr error
	cancelled := false
	select {
	case waitErr = <-done:
	case <-ctx.Done():
		cancelled = true
		// Negative pid: the whole process group.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		waitErr = <-done
	}
	res := runResult{stderr: stderr.String(), exitCode: -1}
	if cmd.ProcessState != nil {
		res.exitCode = cmd.ProcessState.ExitCode()
	}
	log.Debug("qemu-img finished", "elapsed", time.Since(start), "err", waitErr)

	if cancelled {
		return res, fmt.Errorf("qemu-img %s was killed because its context ended (cancelled or timed out; %s): %w", s.sub, withStderr(res.stderr), ctx.Err())
	}
	if waitErr == nil {
		return res, nil
	}
	return res, describeFailure(s, res.stderr, waitErr)
}

func withStderr(stderr string) string {
	if stderr == "" {
		return "no stderr output"
	}
	return "stderr: " + stderr
}

// describeFailure turns an exit status into a message that says whether a
// resource limit was the likely cause.
func describeFailure(s runSpec, stderr string, err error) error {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return fmt.Errorf("qemu-img %s: %w (%s)", s.sub, err, withStderr(stderr))
	}
	lim := fmt.Sprintf("address space %d MiB, CPU %d s", s.limits.AddressSpace/mib, s.limits.CPUSeconds)
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		sig := signalName(ws.Signal())
		switch ws.Signal() {
		case syscall.SIGXCPU, syscall.SIGKILL:
			// RLIMIT_CPU sends SIGXCPU at the soft limit and SIGKILL at the
			// hard one; we did not send SIGKILL ourselves (not cancelled).
			cause := "CPU limit reached"
			if ws.Signal() == syscall.SIGKILL {
				// SIGKILL is also what the OOM killer and `kill -9` send.
				cause = "CPU limit reached, or killed from outside (out-of-memory killer, kill -9)"
			}
			return fmt.Errorf("qemu-img %s was killed by %s: %s (%s; %s)", s.sub, sig, cause, lim, withStderr(stderr))
		case syscall.SIGABRT, syscall.SIGSEGV, syscall.SIGTRAP, syscall.SIGBUS:
			// qemu/glib abort when an allocation (heap or thread stack)
			// fails, which is how RLIMIT_AS shows up.
			return fmt.Errorf("qemu-img %s was killed by %s: address-space or CPU limit reached, or qemu-img crashed (%s; %s)", s.sub, sig, lim, withStderr(stderr))
		}
		return fmt.Errorf("qemu-img %s was killed by %s (%s; %s)", s.sub, sig, lim, withStderr(stderr))
	}
	if isOutOfMemory(stderr) {
		return fmt.Errorf("qemu-img %s failed: address-space limit reached (%s; %s)", s.sub, lim, withStderr(stderr))
	}
	return fmt.Errorf("qemu-img %s failed with exit status %d (%s)", s.sub, ee.ExitCode(), withStderr(stderr))
}

func isOutOfMemory(stderr string) bool {
	s := strings.ToLower(stderr)
	return strings.Contains(s, "cannot allocate memory") || strings.Contains(s, "failed to allocate")
}

// signalName gives the conventional name ("SIGXCPU"); Go's String() gives
// prose ("CPU time limit exceeded") that reads oddly after "killed by".
func signalName(s syscall.Signal) string {
	names := map[syscall.Signal]string{
		syscall.SIGXCPU: "SIGXCPU", syscall.SIGKILL: "SIGKILL", syscall.SIGABRT: "SIGABRT",
		syscall.SIGSEGV: "SIGSEGV", syscall.SIGTRAP: "SIGTRAP", syscall.SIGBUS: "SIGBUS",
		syscall.SIGTERM: "SIGTERM", syscall.SIGXFSZ: "SIGXFSZ",
	}
	if n, ok := names[s]; ok {
		return n
	}
	return fmt.Sprintf("signal %d (%s)", int(s), s)
}

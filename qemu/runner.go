package qemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/sandbox"
)

// Runner runs qemu-img confined by a Landlock sandbox and resource limits
// (the package doc lists them). The zero value is usable.
type Runner struct {
	QemuImg string // qemu-img binary; default "qemu-img" from PATH
	// Limits overrides the per-subcommand defaults field by field (a zero
	// field keeps the default; Limits documents the defaults and why).
	Limits Limits
	// InfoTimeout is the wall-clock limit for info and check; default 30s.
	InfoTimeout time.Duration
	Logger      *slog.Logger

	// unconfined runs qemu-img with the limits but without Landlock; only
	// tests set it, to show what the sandbox prevents.
	unconfined bool
	// missingLandlock makes the "no Landlock" warning appear once per Runner.
	missingLandlock sync.Once
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

// Sandbox names the confinement qemu-img runs under: "landlock vN" (the
// Landlock ABI in force) or "rlimits only" on kernels without Landlock.
func (r *Runner) Sandbox() string {
	if r.unconfined {
		return "rlimits only"
	}
	return sandbox.Describe()
}

// Installed returns nil when qemu-img can be run, else an error matching
// errdefs.ErrToolMissing that says how to install it.
func (r *Runner) Installed() error {
	_, err := r.qemuImgPath()
	return err
}

// qemuImgPath resolves the binary to an absolute path: the sandbox grants
// that one file, and a missing qemu-img is reported as such.
func (r *Runner) qemuImgPath() (string, error) {
	q := r.QemuImg
	if q == "" {
		q = "qemu-img"
	}
	p, err := exec.LookPath(q)
	if err != nil {
		return "", fmt.Errorf("%q is not installed or not in $PATH (Debian, Ubuntu: apt install qemu-utils; Fedora, RHEL: dnf install qemu-img): %w: %w",
			q, errdefs.ErrToolMissing, err)
	}
	if p, err = filepath.Abs(p); err != nil {
		return "", fmt.Errorf("qemu-img (%q): %w", q, err)
	}
	return p, nil
}

// stderrKeep bounds what we keep of qemu-img's stderr from each end: the
// first lines say what failed, the last ones how it ended, and a corrupt
// image can make check print thousands of lines.
const stderrKeep = 1024

// runSpec describes one qemu-img invocation.
type runSpec struct {
	sub    string   // subcommand, for messages
	args   []string // arguments after "qemu-img"
	limits Limits   // already merged with defaults
	stdout io.Writer
	// reads and writes are the qemu-img filenames (paths or json: specs)
	// the run opens; the sandbox grants exactly these, writes read-write.
	reads, writes []string
}

// runResult carries what callers need to interpret a failure.
type runResult struct {
	stderr   string
	exitCode int // qemu-img's exit status; -1 if it did not exit normally
}

// run executes qemu-img in the sandbox. The returned error already names
// the subcommand and includes stderr; res.stderr lets callers look for
// specific messages (e.g. unsupported preallocation) to decide on a retry.
func (r *Runner) run(ctx context.Context, s runSpec) (runResult, error) {
	qemuImg, err := r.qemuImgPath()
	if err != nil {
		return runResult{}, fmt.Errorf("qemu-img %s: %w", s.sub, err)
	}
	if err := ctx.Err(); err != nil {
		return runResult{}, fmt.Errorf("qemu-img %s not started: %w", s.sub, err)
	}
	confinement := r.Sandbox()
	landlock := strings.HasPrefix(confinement, "landlock")
	if !landlock && !r.unconfined {
		r.missingLandlock.Do(func() {
			r.logger().Warn("the kernel has no Landlock: qemu-img runs with resource limits only, not confined to its files")
		})
	}
	policy, err := r.policy(qemuImg, s, landlock)
	if err != nil {
		return runResult{}, fmt.Errorf("qemu-img %s: %w", s.sub, err)
	}
	stderr := sandbox.NewStderrBuffer(stderrKeep, stderrKeep)
	log := r.logger().With("subcommand", s.sub)
	log.Debug("running qemu-img", "args", s.args, "as", s.limits.AddressSpace, "cpu", s.limits.CPUSeconds, "sandbox", confinement)
	start := time.Now()
	// The launcher kills qemu-img's process group when ctx ends and
	// qemu-img dies with us.
	child, err := sandbox.Start(ctx, policy, sandbox.Stdio{Stdout: s.stdout, Stderr: stderr})
	if err != nil {
		return runResult{}, fmt.Errorf("qemu-img %s: %w", s.sub, err)
	}
	waitErr := child.Wait()
	cancelled := waitErr != nil && ctx.Err() != nil
	res := runResult{stderr: stderr.String(), exitCode: child.ExitCode()}
	log.Debug("qemu-img finished", "elapsed", time.Since(start), "err", waitErr)

	if cancelled {
		return res, fmt.Errorf("qemu-img %s was killed because its context ended (cancelled or timed out; %s): %w", s.sub, withStderr(res.stderr), ctx.Err())
	}
	if waitErr == nil {
		return res, nil
	}
	if msg, ok := sandbox.SetupError(res.exitCode, res.stderr); ok {
		return res, fmt.Errorf("qemu-img %s: %s", s.sub, msg)
	}
	if denied := sandboxDenied(confinement, res.stderr); denied != nil {
		return res, fmt.Errorf("qemu-img %s failed: %w (%s)", s.sub, denied, withStderr(res.stderr))
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

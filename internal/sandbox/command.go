package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// selfExe is the running binary as the kernel sees it: unlike the path
// os.Executable returns, it still works when the file was replaced or
// deleted since we started (an upgrade in place).
const selfExe = "/proc/self/exe"

// Command returns a command that runs p.Program confined by p. The caller
// sets stdio, SysProcAttr and the like; Env must be left alone (the
// program's environment is p.Env).
func Command(p *Policy) (*exec.Cmd, error) {
	enc, err := p.encode()
	if err != nil {
		return nil, err
	}
	exe := selfExe
	if _, err := os.Stat(selfExe); err != nil {
		// No /proc (an unusual container): the path we were started from.
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("finding our own executable to start the sandbox: %w", err)
		}
	}
	cmd := exec.Command(exe)
	// argv[0] names what the launcher is for in ps; it becomes the
	// program's own argv after exec.
	cmd.Args = []string{"diskimport-sandbox " + p.Program}
	cmd.Env = []string{policyEnv + "=" + enc}
	return cmd, nil
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

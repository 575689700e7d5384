package sandbox

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// libs are the rules any dynamically linked program needs to start.
var libs = []Rule{
	{Path: "/lib", Read: true, Exec: true, Dir: true, Optional: true},
	{Path: "/lib64", Read: true, Exec: true, Dir: true, Optional: true},
	{Path: "/usr/lib", Read: true, Exec: true, Dir: true, Optional: true},
	{Path: "/usr/lib64", Read: true, Exec: true, Dir: true, Optional: true},
	{Path: "/etc/ld.so.cache", Read: true, Optional: true},
}

func program(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed", name)
	}
	p, err = filepath.EvalSymlinks(p)
	require.NoError(t, err)
	return p
}

// run starts p through the launcher (this test binary re-executed).
func run(t *testing.T, p *Policy) (stdout, stderr string, err error) {
	t.Helper()
	return runWithInput(t, p, "")
}

func runWithInput(t *testing.T, p *Policy, stdin string) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	c, err := Start(context.Background(), p, Stdio{Stdin: strings.NewReader(stdin), Stdout: &o, Stderr: &e})
	require.NoError(t, err)
	err = c.Wait()
	return o.String(), e.String(), err
}

func TestLauncherConfinesToRules(t *testing.T) {
	if ABI() == 0 {
		t.Skip("the kernel has no Landlock")
	}
	cat := program(t, "cat")
	dir := t.TempDir()
	allowed := filepath.Join(dir, "allowed")
	other := filepath.Join(dir, "other")
	require.NoError(t, os.WriteFile(allowed, []byte("granted\n"), 0o600))
	require.NoError(t, os.WriteFile(other, []byte("not granted\n"), 0o600))
	rules := append([]Rule{{Path: cat, Read: true, Exec: true}, {Path: allowed, Read: true}}, libs...)

	out, stderr, err := run(t, &Policy{Program: cat, Args: []string{allowed}, Rules: rules, Landlock: true})
	require.NoError(t, err, stderr)
	assert.Equal(t, "granted\n", out)

	out, stderr, err = run(t, &Policy{Program: cat, Args: []string{other}, Rules: rules, Landlock: true})
	require.Error(t, err)
	assert.Empty(t, out)
	assert.Contains(t, stderr, "Permission denied")

	// The same run without Landlock reads it: the denial above is the sandbox.
	out, _, err = run(t, &Policy{Program: cat, Args: []string{other}})
	require.NoError(t, err)
	assert.Equal(t, "not granted\n", out)
}

func TestLauncherEnvironmentIsThePolicys(t *testing.T) {
	env := program(t, "env")
	t.Setenv("SHOULD_NOT_LEAK", "1")
	out, stderr, err := run(t, &Policy{Program: env, Env: []string{"LC_ALL=C"}})
	require.NoError(t, err, stderr)
	assert.Equal(t, "LC_ALL=C\n", out)
}

func TestLauncherSetsLimits(t *testing.T) {
	sh := program(t, "sh")
	out, stderr, err := run(t, &Policy{Program: sh, Args: []string{"-c", "ulimit -v; ulimit -t; ulimit -n; ulimit -p"},
		AddressSpace: 256 << 20, CPUSeconds: 7, OpenFiles: 16, Processes: 1})
	require.NoError(t, err, stderr)
	assert.Equal(t, "262144\n7\n16\n1\n", out) // ulimit -v is in KiB
}

func TestLauncherSetupFailureIsReported(t *testing.T) {
	if ABI() == 0 {
		t.Skip("the kernel has no Landlock")
	}
	missing := filepath.Join(t.TempDir(), "missing")
	_, stderr, err := run(t, &Policy{Program: "/bin/true", Rules: []Rule{{Path: missing, Read: true}}, Landlock: true})
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "%v", err)
	msg, ok := SetupError(ee.ExitCode(), stderr)
	require.True(t, ok, "exit %d, stderr %q", ee.ExitCode(), stderr)
	assert.Contains(t, msg, missing)

	// An Optional rule for a missing path is skipped instead.
	_, stderr, err = run(t, &Policy{Program: program(t, "true"), Rules: append([]Rule{{Path: program(t, "true"), Read: true, Exec: true}, {Path: missing, Read: true, Optional: true}}, libs...), Landlock: true})
	require.NoError(t, err, stderr)
}

func TestDescribe(t *testing.T) {
	d := Describe()
	if ABI() == 0 {
		assert.Equal(t, "rlimits only", d)
	} else {
		assert.True(t, strings.HasPrefix(d, "landlock v"), d)
	}
}

// The launcher's own Go runtime has mapped more address space than the
// program may get; setting the limit and exec'ing must not touch its heap.
func TestLauncherExecsUnderALimitBelowItsOwnSize(t *testing.T) {
	sh := program(t, "sh")
	for i := 0; i < 20; i++ {
		out, stderr, err := run(t, &Policy{Program: sh, Args: []string{"-c", "ulimit -v"}, AddressSpace: 16 << 20,
			Env: []string{strings.Repeat("X", 100) + "=1"}})
		require.NoError(t, err, stderr)
		require.Equal(t, "16384\n", out)
	}
}

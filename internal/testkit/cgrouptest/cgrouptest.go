// Package cgrouptest runs a test of the calling test binary again as a
// child process, inside a fresh cgroup with a CPU quota (a pod's CPU
// limit, such as CDI's 750m) or outside it, for tests of what a process
// decides from the CPU it may use.
package cgrouptest

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// ChildEnv is set to "1" in the child's environment: the test, run again,
// does its child's part when it finds it.
const ChildEnv = "CGROUPTEST_CHILD"

// v1CPU is the cgroup v1 cpu hierarchy the quota is set in.
const v1CPU = "/sys/fs/cgroup/cpu"

// InChild tells whether this process is the child RunTest started.
func InChild() bool { return os.Getenv(ChildEnv) == "1" }

// NewQuota makes a cgroup with a CFS quota of quotaUS per periodUS (a
// 750m limit: 75000 per 100000), removed when the test ends, and returns
// its directory. It skips the test without root or a cgroup v1 cpu
// hierarchy.
func NewQuota(t *testing.T, quotaUS, periodUS int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a cgroup")
	}
	if _, err := os.Stat(filepath.Join(v1CPU, "cpu.cfs_quota_us")); err != nil {
		t.Skip("no cgroup v1 cpu hierarchy at " + v1CPU)
	}
	dir, err := os.MkdirTemp(v1CPU, "cgrouptest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	for name, v := range map[string]int{"cpu.cfs_period_us": periodUS, "cpu.cfs_quota_us": quotaUS} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strconv.Itoa(v)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// RunTest runs the test named name of this test binary again as a child
// (ChildEnv set), inside the cgroup at dir when dir is not "", and returns
// its output; it fails the test when the child fails.
func RunTest(t *testing.T, dir, name string) string {
	t.Helper()
	script := `exec "$0" -test.run "^$1\$" -test.count 1`
	if dir != "" {
		script = `echo $$ >"$2/cgroup.procs" && ` + script
	}
	cmd := exec.Command("sh", "-c", script, os.Args[0], name, dir)
	cmd.Env = append(os.Environ(), ChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s as a child: %v\n%s", name, err, out)
	}
	return string(out)
}

// RunTestValue runs the test named name again as RunTest does and returns
// the value the child printed on a line "key=value"; it fails the test
// when the child printed none.
func RunTestValue(t *testing.T, dir, name, key string) string {
	t.Helper()
	return RunTestValues(t, dir, name, key)[key]
}

// RunTestValues is RunTestValue for several keys, from one run of the
// child.
func RunTestValues(t *testing.T, dir, name string, keys ...string) map[string]string {
	t.Helper()
	out := RunTest(t, dir, name)
	values := make(map[string]string, len(keys))
	for line := range strings.Lines(out) {
		k, v, ok := strings.Cut(strings.TrimRight(line, "\n"), "=")
		if ok && slices.Contains(keys, k) {
			if _, seen := values[k]; !seen {
				values[k] = v
			}
		}
	}
	for _, k := range keys {
		if _, ok := values[k]; !ok {
			t.Fatalf("%s as a child printed no %s= line:\n%s", name, k, out)
		}
	}
	return values
}

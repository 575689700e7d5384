package format

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testkit/cgrouptest"
)

func TestXZThreads(t *testing.T) {
	const MiB, GiB = 1 << 20, 1 << 30
	for _, c := range []struct {
		name             string
		limit, available int64
		cores            int
		threads          int
		budget           int64
	}{
		{"small pod: half the limit", 256 * MiB, 20 * GiB, 2, 2, 128 * MiB},
		{"pod on a busy node: a quarter of what is available", 2 * GiB, 1 * GiB, 2, 2, 256 * MiB},
		{"no limit: a quarter of what is available", 0, 2 * GiB, 4, 4, 512 * MiB},
		{"no limit, big node: capped per thread", 0, 64 * GiB, 2, 2, 2 * xzMaxPerThread},
		{"one core", 256 * MiB, 20 * GiB, 1, 1, 128 * MiB},
		{"no cores reported", 256 * MiB, 20 * GiB, 0, 1, 128 * MiB},
		{"nothing available: never xz's default", 256 * MiB, 0, 2, 2, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			threads, budget := xzThreads(c.limit, c.available, c.cores)
			assert.Equal(t, c.threads, threads)
			assert.Equal(t, c.budget, budget)
		})
	}
}

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
}

func TestCgroupMemoryLimitTrees(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		want  int64
	}{
		{"v1", map[string]string{
			"self":                           "4:memory:/pod/a\n1:cpu:/\n0::/\n",
			"sys/memory/pod/a/memory.stat":   "cache 0\nhierarchical_memory_limit 268435456\n",
			"sys/memory/memory.stat":         "hierarchical_memory_limit 9223372036854771712\n",
			"sys/unified/cgroup.controllers": "",
		}, 256 << 20},
		{"v1 unlimited", map[string]string{
			"self":                   "4:memory:/\n",
			"sys/memory/memory.stat": "hierarchical_memory_limit 9223372036854771712\n",
		}, 0},
		{"v1 own cgroup mounted as the root", map[string]string{
			"self":                   "4:memory:/pod/a\n",
			"sys/memory/memory.stat": "hierarchical_memory_limit 536870912\n",
		}, 512 << 20},
		{"v2: the parent's limit binds", map[string]string{
			"self":                          "0::/kubepods/pod/c\n",
			"sys/cgroup.controllers":        "cpu memory\n",
			"sys/kubepods/pod/memory.max":   "268435456\n",
			"sys/kubepods/pod/c/memory.max": "max\n",
		}, 256 << 20},
		{"v2 unlimited", map[string]string{
			"self":                   "0::/a\n",
			"sys/cgroup.controllers": "memory\n",
			"sys/a/memory.max":       "max\n",
		}, 0},
		{"no memory controller", map[string]string{"self": "0::/a\n"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, c.files)
			got, err := cgroupMemoryLimit(filepath.Join(dir, "self"), filepath.Join(dir, "sys"))
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}

	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"self": "0::/a\n", "sys/cgroup.controllers": "", "sys/a/memory.max": "lots\n"})
	_, err := cgroupMemoryLimit(filepath.Join(dir, "self"), filepath.Join(dir, "sys"))
	assert.ErrorIs(t, err, strconv.ErrSyntax)
	_, err = cgroupMemoryLimit(filepath.Join(dir, "missing"), filepath.Join(dir, "sys"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// TestCgroupMemoryLimitHere reads this machine's real files: whatever the
// cgroup layout, the limit must be readable and agree with the kernel's own
// file for our cgroup when that is where we expect it.
func TestCgroupMemoryLimitHere(t *testing.T) {
	limit, err := cgroupMemoryLimit("/proc/self/cgroup", "/sys/fs/cgroup")
	require.NoError(t, err)
	avail, err := memAvailable("/proc/meminfo")
	require.NoError(t, err)
	assert.Positive(t, avail)
	threads, budget, err := xzThreadsHere()
	require.NoError(t, err)
	t.Logf("cgroup limit %d, available %d MiB: xz -T%d --memlimit-mt-decompress=%d MiB", limit, avail>>20, threads, budget>>20)

	self, err := os.ReadFile("/proc/self/cgroup")
	require.NoError(t, err)
	for _, line := range strings.Split(string(self), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && parts[1] == "memory" {
			b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes"))
			if err != nil {
				t.Skipf("our v1 cgroup is not at its path here: %v", err)
			}
			own, err := parseMemLimit(string(b))
			require.NoError(t, err)
			// The hierarchical limit is the smallest of ours and our
			// ancestors'.
			if own > 0 {
				assert.LessOrEqual(t, limit, own)
				assert.Positive(t, limit)
			}
		}
	}
}

// BenchmarkXZFile decodes the xz file named by $XZ_BENCH_FILE through Open
// into io.Discard, to compare with `xz -T0 -dc FILE > /dev/null`.
func BenchmarkXZFile(b *testing.B) {
	path := os.Getenv("XZ_BENCH_FILE")
	if path == "" {
		b.Skip("set XZ_BENCH_FILE to an .xz file")
	}
	buf := make([]byte, 1<<20)
	for b.Loop() {
		f, err := os.Open(path)
		require.NoError(b, err)
		s, err := Open(context.Background(), f, Options{})
		require.NoError(b, err)
		// A 1 MiB buffer as the importer's copy uses; io.Discard's own
		// ReadFrom reads 8 KiB at a time.
		n, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, s, buf)
		require.NoError(b, err)
		b.SetBytes(n)
		require.NoError(b, s.Close())
		require.NoError(b, f.Close())
	}
}

// TestXZThreadsInCgroup runs this test binary inside a new 256 MiB memory
// cgroup (v1 or v2) and checks that the budget it computes there is half of
// that limit: the real kernel files, read from inside, as in a pod.
func TestXZThreadsInCgroup(t *testing.T) {
	if os.Getenv("XZBUDGET_CHILD") == "1" {
		threads, budget, err := xzThreadsHere()
		require.NoError(t, err)
		fmt.Printf("threads=%d budget=%d\n", threads, budget)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("creating a memory cgroup needs root")
	}
	const limit = 256 << 20
	dir, limitFile := "", ""
	switch {
	case fileExists("/sys/fs/cgroup/memory/memory.limit_in_bytes"):
		dir, limitFile = "/sys/fs/cgroup/memory", "memory.limit_in_bytes"
	case fileExists("/sys/fs/cgroup/cgroup.controllers"):
		dir, limitFile = "/sys/fs/cgroup", "memory.max"
	default:
		t.Skip("no cgroup memory controller")
	}
	dir = filepath.Join(dir, fmt.Sprintf("xzbudget-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot create a cgroup: %v", err)
	}
	t.Cleanup(func() { assert.NoError(t, os.Remove(dir)) })
	if err := os.WriteFile(filepath.Join(dir, limitFile), []byte(strconv.Itoa(limit)), 0o644); err != nil {
		t.Skipf("cannot set the cgroup's memory limit: %v", err)
	}
	// The shell joins the cgroup, then becomes the test binary.
	cmd := exec.Command("sh", "-c", `echo $$ > "$CG/cgroup.procs" && exec "$@"`, "sh",
		os.Args[0], "-test.run=^TestXZThreadsInCgroup$")
	cmd.Env = append(os.Environ(), "CG="+dir, "XZBUDGET_CHILD=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), fmt.Sprintf("threads=%d budget=%d\n", max(runtime.NumCPU(), 1), limit/2))
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestXZChildThreadsFollowTheCgroupsCPUQuota: each xz child (the xz
// tool's pipe, diskimport-inflate's ring) is started with one thread
// inside a cgroup with CDI's 750m quota (where GOMAXPROCS is 2 on this
// 2-core machine, and xz got -T2), and with the host's CPUs inside one
// without a quota: the arguments of the running child, read from /proc,
// while it decodes a multi-block file whose bytes come out whole.
func TestXZChildThreadsFollowTheCgroupsCPUQuota(t *testing.T) {
	modes := xzModes(t)
	delete(modes, "go")
	if cgrouptest.InChild() {
		raw := variedContent(8<<20, 43)
		p := filepath.Join(t.TempDir(), "d")
		writeRaw(t, p, raw)
		// Blocks of 1 MiB: a file xz would decode on several threads.
		z, err := exec.Command(needTool(t, "xz"), "-1", "-T2", "--block-size=1MiB", "-c", p).Output()
		require.NoError(t, err)
		for mode, o := range modes {
			args := decodeReadingChildArgs(t, z, raw, o)
			threads := ""
			switch mode {
			case "ring":
				threads = args[7] // PROTOCOL xz SLOT_BYTES SLOTS IN_SLOT_BYTES IN_SLOTS THREADS …
			case "external":
				for _, arg := range args {
					if v, ok := strings.CutPrefix(arg, "-T"); ok {
						threads = v
					}
				}
			}
			fmt.Printf("%s-threads=%s\n", mode, threads)
		}
		return
	}
	needTool(t, "xz")
	limited := cgrouptest.NewQuota(t, 75000, 100000)
	unlimited := cgrouptest.NewQuota(t, -1, 100000)
	var keys []string
	for mode := range modes {
		keys = append(keys, mode+"-threads")
	}
	inLimited := cgrouptest.RunTestValues(t, limited, t.Name(), keys...)
	inUnlimited := cgrouptest.RunTestValues(t, unlimited, t.Name(), keys...)
	for mode := range modes {
		assert.Equal(t, "1", inLimited[mode+"-threads"], "%s inside the 750m cgroup", mode)
		assert.Equal(t, fmt.Sprint(runtime.NumCPU()), inUnlimited[mode+"-threads"], "%s inside a cgroup without a quota", mode)
	}
}

// decodeReadingChildArgs decodes z with the child o selects, checks that
// the bytes are raw, and returns the child's arguments as it ran.
func decodeReadingChildArgs(t *testing.T, z, raw []byte, o Options) []string {
	d, err := NewDecompressor(context.Background(), XZ, bytes.NewReader(z), o.withDefaults())
	require.NoError(t, err)
	defer d.Close()
	got := make([]byte, len(raw))
	_, err = io.ReadFull(d, got[:1<<20])
	require.NoError(t, err)
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", d.(*decoder).r.(*childProc).child.Pid()))
	require.NoError(t, err)
	_, err = io.ReadFull(d, got[1<<20:])
	require.NoError(t, err)
	require.True(t, bytes.Equal(raw, got), "decoded bytes differ")
	return strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
}

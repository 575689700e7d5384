package cpulimit

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testkit/cgrouptest"
)

// The mountinfo lines of the hierarchies a tree below declares.
const (
	v1Mounts = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
`
	v2Mounts = `30 23 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate
`
	// A container's view: the hierarchy mounted from the pod's cgroup
	// down, which /proc/self/cgroup still names in full.
	v1ContainerMounts = `1200 1100 0:29 /kubepods/pod1/ctr /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup rw,cpu,cpuacct
`
)

// TestCoresReadTheCgroupsCPULimit: the CPUs a process may use are its
// cgroup's quota / period when that is less than its CPUs, the tightest
// of its cgroup and the parents, in cgroup v1 (cpu.cfs_quota_us,
// cpu.cfs_period_us) and v2 (cpu.max), and its CPUs without a limit.
func TestCoresReadTheCgroupsCPULimit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cgroup string
		mounts string
		files  map[string]string // below the tree's root
		ncpu   int
		want   float64
	}{
		{
			name:   "v1 750m",
			cgroup: "9:name=systemd:/\n4:memory:/pod\n2:cpu,cpuacct:/pod\n0::/\n",
			mounts: v1Mounts,
			files: map[string]string{
				"sys/fs/cgroup/cpu,cpuacct/pod/cpu.cfs_quota_us":  "75000\n",
				"sys/fs/cgroup/cpu,cpuacct/pod/cpu.cfs_period_us": "100000\n",
			},
			ncpu: 2, want: 0.75,
		},
		{
			name:   "v1 no quota",
			cgroup: "2:cpu,cpuacct:/pod\n",
			mounts: v1Mounts,
			files: map[string]string{
				"sys/fs/cgroup/cpu,cpuacct/pod/cpu.cfs_quota_us":  "-1\n",
				"sys/fs/cgroup/cpu,cpuacct/pod/cpu.cfs_period_us": "100000\n",
			},
			ncpu: 2, want: 2,
		},
		{
			name:   "v1 a parent's quota caps the child",
			cgroup: "2:cpu,cpuacct:/kubepods/pod1/ctr\n",
			mounts: v1Mounts,
			files: map[string]string{
				"sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/ctr/cpu.cfs_quota_us":  "-1\n",
				"sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/ctr/cpu.cfs_period_us": "100000\n",
				"sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/cpu.cfs_quota_us":      "50000\n",
				"sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/cpu.cfs_period_us":     "100000\n",
				"sys/fs/cgroup/cpu,cpuacct/kubepods/cpu.cfs_quota_us":           "400000\n",
				"sys/fs/cgroup/cpu,cpuacct/kubepods/cpu.cfs_period_us":          "100000\n",
			},
			ncpu: 8, want: 0.5,
		},
		{
			name:   "v1 a quota above the CPUs",
			cgroup: "2:cpu,cpuacct:/pod\n",
			mounts: v1Mounts,
			files: map[string]string{
				"sys/fs/cgroup/cpu,cpuacct/pod/cpu.cfs_quota_us":  "400000\n",
				"sys/fs/cgroup/cpu,cpuacct/pod/cpu.cfs_period_us": "100000\n",
			},
			ncpu: 2, want: 2,
		},
		{
			name:   "v1 mounted from the container's cgroup",
			cgroup: "2:cpu,cpuacct:/kubepods/pod1/ctr\n",
			mounts: v1ContainerMounts,
			files: map[string]string{
				"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us":  "150000\n",
				"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
			},
			ncpu: 4, want: 1.5,
		},
		{
			name:   "v2 cpu.max",
			cgroup: "0::/kubepods.slice/pod1.slice/ctr.scope\n",
			mounts: v2Mounts,
			files: map[string]string{
				"sys/fs/cgroup/kubepods.slice/pod1.slice/ctr.scope/cpu.max": "max 100000\n",
				"sys/fs/cgroup/kubepods.slice/pod1.slice/cpu.max":           "75000 100000\n",
			},
			ncpu: 4, want: 0.75,
		},
		{
			name:   "v2 max",
			cgroup: "0::/user.slice\n",
			mounts: v2Mounts,
			files:  map[string]string{"sys/fs/cgroup/user.slice/cpu.max": "max 100000\n"},
			ncpu:   4, want: 4,
		},
		{
			name:   "no cgroup files",
			cgroup: "",
			mounts: "",
			files:  nil,
			ncpu:   3, want: 3,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			files := map[string]string{"proc/self/cgroup": tc.cgroup, "proc/self/mountinfo": tc.mounts}
			if tc.cgroup == "" {
				files = nil
			}
			for name, body := range tc.files {
				files[name] = body
			}
			for name, body := range files {
				p := filepath.Join(root, name)
				require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
				require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
			}
			assert.InDelta(t, tc.want, coresUnder(root, tc.ncpu), 1e-9)
		})
	}
}

// TestCoresInARealCgroupQuota: this test's binary run again inside a
// fresh cgroup with a 75 ms / 100 ms CFS quota (CDI's 750m) reports 0.75
// CPUs, and outside it the machine's CPUs; Go's own GOMAXPROCS cannot
// tell the two apart on two CPUs (it rounds a limit up, to 2 at least).
func TestCoresInARealCgroupQuota(t *testing.T) {
	if cgrouptest.InChild() {
		fmt.Printf("cores=%g\n", Cores())
		return
	}
	dir := cgrouptest.NewQuota(t, 75000, 100000)
	assert.Equal(t, "0.75", cgrouptest.RunTestValue(t, dir, t.Name(), "cores"), "inside the 750m cgroup")
	assert.Equal(t, fmt.Sprintf("%g", Cores()), cgrouptest.RunTestValue(t, "", t.Name(), "cores"), "outside it, as this process")
}

// TestWorkersAreTheCoresRoundedAtLeastOne: a pool is sized by the CPUs
// rounded to the nearest whole one, never 0: a 750m pod gets one worker,
// where GOMAXPROCS gives it two.
func TestWorkersAreTheCoresRoundedAtLeastOne(t *testing.T) {
	for cores, want := range map[float64]int{0.1: 1, 0.5: 1, 0.75: 1, 1: 1, 1.4: 1, 1.5: 2, 2: 2, 2.5: 3, 16: 16} {
		assert.Equal(t, want, workersOf(cores), "%g CPUs", cores)
	}
}

// TestWorkersInARealCgroupQuota: this test's binary run again inside a
// fresh cgroup with CDI's 750m quota (75 ms / 100 ms) sizes its pools at
// one worker, and inside one without a quota at the host's CPUs.
func TestWorkersInARealCgroupQuota(t *testing.T) {
	if cgrouptest.InChild() {
		fmt.Printf("workers=%d\n", Workers())
		return
	}
	limited := cgrouptest.NewQuota(t, 75000, 100000)
	unlimited := cgrouptest.NewQuota(t, -1, 100000)
	assert.Equal(t, "1", cgrouptest.RunTestValue(t, limited, t.Name(), "workers"), "inside the 750m cgroup")
	assert.Equal(t, fmt.Sprint(runtime.NumCPU()), cgrouptest.RunTestValue(t, unlimited, t.Name(), "workers"), "inside a cgroup without a quota")
}

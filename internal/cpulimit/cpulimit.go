// Package cpulimit tells how much CPU this process may really use: the CPUs
// it may run on, or less when its cgroup caps its CPU time (a pod's CPU
// limit, such as CDI's 750m: a CFS quota of 75 ms per 100 ms period).
//
// Go sets GOMAXPROCS from the same limit, but rounded up and at least 2
// (since Go 1.25, runtime/cgroup_linux.go), so a 750m pod and an unlimited
// 2-core machine both see GOMAXPROCS 2; a decision that differs between
// them reads Cores instead.
package cpulimit

import (
	"math"
	"os"
	"path"
	"runtime"
	"strconv"
	"strings"

	"github.com/diskimport/engine/internal/mountinfo"
)

// Cores is the CPU time this process may use, in CPUs: the smaller of the
// CPUs it may run on (runtime.NumCPU, the affinity mask) and its cgroup's
// CPU bandwidth limit, quota / period (cgroup v1 cpu.cfs_quota_us and
// cpu.cfs_period_us, or v2 cpu.max), the tightest of its cgroup and every
// parent up to the hierarchy's mount. With no limit, or none readable, it
// is the CPU count.
func Cores() float64 {
	return coresUnder("/", runtime.NumCPU())
}

// Workers is how many threads of work this process may keep busy at
// once: Cores rounded to the nearest whole CPU, at least 1 (a 750m pod,
// CDI's default limit, gets 1; an unlimited 2-core machine 2). It is the
// count for what Go's scheduler does not bound, where GOMAXPROCS (rounded
// up, 2 at least) would give a 750m pod two: the threads of a decoder
// child (xz -T), and whether a stream is read ahead on a goroutine of its
// own (with one CPU nothing runs sooner for it; see importer's
// decodeStream).
//
// Go's own worker pools (the stream decoder's inflaters, the content
// hash) stay at GOMAXPROCS: Go runs no more of them at once than that, and
// one worker measured worse under a 750m quota (1 GiB bench disk over one
// GET onto a file, medians of 5 interleaved runs: compressed qcow2 2.83
// -> 3.16 CPU-s, 3.97 -> 4.21 s; raw, one hash worker, 0.75 -> 0.80 CPU-s,
// 1.26 -> 1.76 s).
func Workers() int {
	return workersOf(Cores())
}

// workersOf is Workers for cores CPUs.
func workersOf(cores float64) int {
	return max(int(math.Round(cores)), 1)
}

// coresUnder is Cores with /proc and the cgroup mounts read under root
// (a test's tree) and ncpu CPUs to run on.
func coresUnder(root string, ncpu int) float64 {
	cores := float64(ncpu)
	if limit, ok := cgroupLimit(root); ok && limit < cores {
		cores = limit
	}
	return cores
}

// cgroupLimit reads the CPU bandwidth limit of the process's cgroup: the
// v1 hierarchy that holds the cpu controller when there is one (a hybrid
// host lists an empty v2 line beside it), else the v2 hierarchy.
func cgroupLimit(root string) (float64, bool) {
	groups, err := os.ReadFile(path.Join(root, "proc/self/cgroup"))
	if err != nil {
		return 0, false
	}
	mounts, err := mountinfo.Read(path.Join(root, "proc/self/mountinfo"))
	if err != nil {
		return 0, false
	}
	var v2Path string
	haveV2 := false
	for _, line := range strings.Split(string(groups), "\n") {
		// hierarchy-ID:controller-list:cgroup-path
		id, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		controllers, p, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		if id == "0" && controllers == "" {
			v2Path, haveV2 = p, true
			continue
		}
		if hasItem(controllers, "cpu") {
			dir, ok := cgroupDir(mounts, "cgroup", p)
			if !ok {
				return 0, false
			}
			return tightest(root, dir, v1Limit)
		}
	}
	if !haveV2 {
		return 0, false
	}
	dir, ok := cgroupDir(mounts, "cgroup2", v2Path)
	if !ok {
		return 0, false
	}
	return tightest(root, dir, v2Limit)
}

// hierarchyDir is a cgroup's directory and the mount point of its
// hierarchy, both as the host names them (root not joined).
type hierarchyDir struct{ dir, mount string }

// cgroupDir finds the directory of the cgroup at cgroup path p in the
// mount of fstype (cgroup: the one whose options name the cpu
// controller; cgroup2). A mount of part of the hierarchy (its root field
// is not "/", as in a container) holds the paths below its root.
func cgroupDir(mounts []mountinfo.Mount, fstype, p string) (hierarchyDir, bool) {
	for _, m := range mounts {
		if m.FSType != fstype || fstype == "cgroup" && !m.HasOption("cpu") {
			continue
		}
		rel := p
		switch {
		case m.Root == "/":
		case rel == m.Root:
			rel = "/"
		case strings.HasPrefix(rel, m.Root+"/"):
			rel = strings.TrimPrefix(rel, m.Root)
		default:
			// The cgroup lies outside what is mounted: read the
			// mount's own limits, the closest there are.
			rel = "/"
		}
		return hierarchyDir{dir: path.Join(m.Point, rel), mount: m.Point}, true
	}
	return hierarchyDir{}, false
}

// tightest is the smallest limit limitAt reads in the cgroup's directory
// and its parents up to the mount point (a parent's limit caps its
// children), each read under root.
func tightest(root string, d hierarchyDir, limitAt func(dir string) (float64, bool)) (float64, bool) {
	best, found := math.Inf(1), false
	for dir := d.dir; ; dir = path.Dir(dir) {
		if limit, ok := limitAt(path.Join(root, dir)); ok && limit < best {
			best, found = limit, true
		}
		if dir == d.mount || dir == "/" || !strings.HasPrefix(dir, d.mount) {
			break
		}
	}
	return best, found
}

// v1Limit reads cpu.cfs_quota_us / cpu.cfs_period_us (a quota of -1: no
// limit).
func v1Limit(dir string) (float64, bool) {
	quota, ok := readInt(path.Join(dir, "cpu.cfs_quota_us"))
	if !ok || quota <= 0 {
		return 0, false
	}
	period, ok := readInt(path.Join(dir, "cpu.cfs_period_us"))
	if !ok || period <= 0 {
		return 0, false
	}
	return float64(quota) / float64(period), true
}

// v2Limit reads cpu.max, "QUOTA PERIOD" or "max PERIOD".
func v2Limit(dir string) (float64, bool) {
	b, err := os.ReadFile(path.Join(dir, "cpu.max"))
	if err != nil {
		return 0, false
	}
	q, p, ok := strings.Cut(strings.TrimSpace(string(b)), " ")
	if !ok || q == "max" {
		return 0, false
	}
	quota, err1 := strconv.ParseInt(q, 10, 64)
	period, err2 := strconv.ParseInt(p, 10, 64)
	if err1 != nil || err2 != nil || quota <= 0 || period <= 0 {
		return 0, false
	}
	return float64(quota) / float64(period), true
}

func readInt(name string) (int64, bool) {
	b, err := os.ReadFile(name)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// hasItem tells whether the comma-separated list holds item.
func hasItem(list, item string) bool {
	for _, s := range strings.Split(list, ",") {
		if s == item {
			return true
		}
	}
	return false
}

package format

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/diskimport/engine/internal/cpulimit"
)

// xzMaxPerThread bounds the xz child's multi-threaded budget per thread
// when memory is plentiful: enough for xz -9 -T0 blocks (64 MiB dictionary,
// 192 MiB blocks, input and output buffered), while a hostile block header
// declaring a huge block cannot make the child take a node's worth.
const xzMaxPerThread = 512 << 20

// xzThreads picks the xz child's thread count and the memory it may use
// for multi-threaded decoding (--memlimit-mt-decompress) from the cgroup
// memory limit (0: none), the host's available memory and the cores.
//
// xz itself then starts as many threads as the file's block sizes allow
// within the budget, so the block size needs no reading here; a
// single-block file is decoded by one thread whatever we pass.
//
// Half of the limit stays free for the rest of the import (our buffers,
// the page cache of writes in flight, qemu-img). Memory the host does not
// have is not counted, and without a limit the node is shared, so only a
// quarter of what is available is taken then.
func xzThreads(limit, available int64, cores int) (threads int, budget int64) {
	threads = max(cores, 1)
	budget = available / 4
	if limit > 0 {
		budget = min(budget, limit/2)
	}
	budget = min(budget, int64(threads)*xzMaxPerThread)
	// 0 would mean xz's own default (a quarter of RAM), not "nothing":
	// 1 byte makes xz decode single-threaded.
	return threads, max(budget, 1)
}

// xzThreadsHere is xzThreads for this process. When the limits cannot be
// read the answer is conservative: the budget of the previous fixed
// setting, which gives one or two threads on common files.
//
// The cores are the workers the process may keep busy, cpulimit.Workers
// (the cgroup's CPU limit rounded, the affinity mask, at least 1), as for
// every pool of the import. NumCPU counted the node (a 750m pod on a
// 16-core node ran xz -T16); GOMAXPROCS rounds a limit up to 2 at least,
// so a 750m pod ran xz -T2.
func xzThreadsHere() (threads int, budget int64, err error) {
	cores := cpulimit.Workers()
	limit, lerr := cgroupMemoryLimit("/proc/self/cgroup", "/sys/fs/cgroup")
	avail, aerr := memAvailable("/proc/meminfo")
	if err := errors.Join(lerr, aerr); err != nil {
		return max(cores, 1), 64 << 20, err
	}
	threads, budget = xzThreads(limit, avail, cores)
	return threads, budget, nil
}

// cgroupMemoryLimit returns the memory limit of the cgroup this process
// runs in, including its ancestors' limits, or 0 when there is none.
// procCgroup is /proc/self/cgroup and root is where the cgroup
// filesystems are mounted (/sys/fs/cgroup); both are parameters so that
// tests can point them at a tree of their own.
func cgroupMemoryLimit(procCgroup, root string) (int64, error) {
	b, err := os.ReadFile(procCgroup)
	if err != nil {
		return 0, fmt.Errorf("reading cgroup membership: %w", err)
	}
	var v2Path string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2Path = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				return cgroupV1Limit(filepath.Join(root, "memory"), parts[2])
			}
		}
	}
	// Only a pure v2 mount holds the memory controller; a hybrid host's
	// /sys/fs/cgroup/unified does not (and the v1 line was found above).
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil || v2Path == "" {
		return 0, nil
	}
	return cgroupV2Limit(root, v2Path)
}

// cgroupV1Limit reads hierarchical_memory_limit from memory.stat, which
// already is the smallest limit among the cgroup and its ancestors. Inside
// a container the cgroup's own directory is often mounted as the root, so
// the path from /proc/self/cgroup is tried first, then the mount's root.
func cgroupV1Limit(mount, path string) (int64, error) {
	for _, dir := range []string{filepath.Join(mount, path), mount} {
		b, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("reading cgroup memory limit: %w", err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "hierarchical_memory_limit "); ok {
				return parseMemLimit(v)
			}
		}
		return 0, fmt.Errorf("%s/memory.stat has no hierarchical_memory_limit", dir)
	}
	return 0, nil
}

// cgroupV2Limit walks from the cgroup up to the root: v2 has no
// hierarchical summary, and a parent's memory.max binds its children.
func cgroupV2Limit(root, path string) (int64, error) {
	var limit int64
	for dir := filepath.Join(root, path); ; dir = filepath.Dir(dir) {
		b, err := os.ReadFile(filepath.Join(dir, "memory.max"))
		switch {
		case err == nil:
			n, err := parseMemLimit(string(b))
			if err != nil {
				return 0, err
			}
			if n > 0 && (limit == 0 || n < limit) {
				limit = n
			}
		case !errors.Is(err, fs.ErrNotExist):
			return 0, fmt.Errorf("reading cgroup memory limit: %w", err)
		}
		if len(dir) <= len(root) {
			return limit, nil
		}
	}
}

// parseMemLimit reads a cgroup limit; "max" (v2) and the page-rounded
// 2^63 of v1 mean no limit and become 0.
func parseMemLimit(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cgroup memory limit %q: %w", s, err)
	}
	if n >= 1<<62 {
		return 0, nil
	}
	return int64(n), nil
}

// memAvailable returns MemAvailable from /proc/meminfo in bytes.
func memAvailable(meminfo string) (int64, error) {
	b, err := os.ReadFile(meminfo)
	if err != nil {
		return 0, fmt.Errorf("reading available memory: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("MemAvailable %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("%s has no MemAvailable", meminfo)
}

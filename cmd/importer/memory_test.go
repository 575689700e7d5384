package main

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testimg"
)

const (
	memLimit      = 256 << 20 // a small import pod
	dirtyPeakMost = 100 << 20 // dirty + writeback pages the import may hold at once
)

// memCgroup is a cgroup (v1 or v2) with a memory limit, removed at the end.
type memCgroup struct {
	dir      string
	peakFile string
	v2       bool
}

func newMemCgroup(t *testing.T, limit int64) *memCgroup {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("creating a memory cgroup needs root")
	}
	name := fmt.Sprintf("importer-test-%d", rand.Uint32())
	var cg memCgroup
	switch {
	case fileExists("/sys/fs/cgroup/memory/memory.limit_in_bytes"):
		cg = memCgroup{dir: filepath.Join("/sys/fs/cgroup/memory", name), peakFile: "memory.max_usage_in_bytes"}
	case fileExists("/sys/fs/cgroup/cgroup.controllers"):
		cg = memCgroup{dir: filepath.Join("/sys/fs/cgroup", name), peakFile: "memory.peak", v2: true}
	default:
		t.Skip("no cgroup memory controller")
	}
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		t.Skipf("cannot create a cgroup: %v", err)
	}
	t.Cleanup(func() {
		// The test's processes have exited; the cgroup is empty now.
		if err := os.Remove(cg.dir); err != nil {
			t.Errorf("removing cgroup %s: %v", cg.dir, err)
		}
	})
	limitFile := "memory.limit_in_bytes"
	if cg.v2 {
		limitFile = "memory.max"
	}
	if err := os.WriteFile(filepath.Join(cg.dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		t.Skipf("cannot set the cgroup's memory limit: %v", err)
	}
	if !fileExists(filepath.Join(cg.dir, cg.peakFile)) {
		t.Skipf("the cgroup has no %s", cg.peakFile)
	}
	return &cg
}

func (cg *memCgroup) read(t *testing.T, name string) string {
	b, err := os.ReadFile(filepath.Join(cg.dir, name))
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}

func (cg *memCgroup) peak(t *testing.T) int64 {
	n, err := strconv.ParseInt(cg.read(t, cg.peakFile), 10, 64)
	require.NoError(t, err)
	return n
}

// oomKills is how many processes the limit killed.
func (cg *memCgroup) oomKills(t *testing.T) int {
	file := "memory.oom_control"
	if cg.v2 {
		file = "memory.events"
	}
	for _, line := range strings.Split(cg.read(t, file), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == "oom_kill" {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// dirty returns the cgroup's dirty plus writeback page-cache bytes now.
func (cg *memCgroup) dirty() int64 {
	b, err := os.ReadFile(filepath.Join(cg.dir, "memory.stat"))
	if err != nil {
		return 0
	}
	var n int64
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, " ")
		switch k {
		case "dirty", "writeback", "file_dirty", "file_writeback":
			x, _ := strconv.ParseInt(v, 10, 64)
			n += x
		}
	}
	return n
}

// run runs the command inside the cgroup from its first instruction and
// samples the cgroup's dirty+writeback pages every 20 ms meanwhile.
func (cg *memCgroup) run(bin string, args ...string) (out []byte, dirtyPeak int64, err error) {
	return cg.runStdin(nil, bin, args...)
}

// runStdin is run with stdin as the command's standard input.
func (cg *memCgroup) runStdin(stdin io.Reader, bin string, args ...string) (out []byte, dirtyPeak int64, err error) {
	script := `echo $$ > "$CG/cgroup.procs" && exec "$@"`
	cmd := exec.Command("sh", append([]string{"-c", script, "sh", bin}, args...)...)
	cmd.Env = append(os.Environ(), "CG="+cg.dir)
	cmd.Stdin = stdin
	done := make(chan struct{})
	peak := make(chan int64)
	go func() {
		var max int64
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				peak <- max
				return
			case <-tick.C:
				max = maxInt(max, cg.dirty())
			}
		}
	}()
	out, err = cmd.CombinedOutput()
	close(done)
	return out, <-peak, err
}

func maxInt(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// writeBigDisk writes a raw disk of size bytes streaming (never all in
// memory): a third random, a third text, the rest holes.
func writeBigDisk(t *testing.T, path string, size int64) {
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	rng := rand.New(rand.NewPCG(42, 43))
	block := make([]byte, 1<<20)
	text := []byte("the importer keeps its memory bounded inside a small pod\n")
	for off := int64(0); off < size; off += int64(len(block)) {
		switch (off >> 20) % 3 {
		case 0:
			for i := 0; i < len(block); i += 8 {
				v := rng.Uint64()
				for k := 0; k < 8; k++ {
					block[i+k] = byte(v >> (8 * k))
				}
			}
		case 1:
			for i := 0; i < len(block); i += copy(block[i:], text) {
			}
		default:
			require.NoError(t, w.Flush())
			_, err := f.Seek(int64(len(block)), 1)
			require.NoError(t, err)
			continue
		}
		_, err := w.Write(block)
		require.NoError(t, err)
	}
	require.NoError(t, w.Flush())
	require.NoError(t, f.Truncate(size))
}

// TestImportInSmallMemoryCgroup imports a 1 GiB disk inside a 256 MiB
// memory cgroup (page cache is charged to it, as in a pod) and checks that
// nothing is OOM-killed, the content is right and dirty pages stay bounded:
// targets are written with O_DIRECT and scratch writeback is paced (as is
// the stream decoder's file target), so neither the copy, the decoder nor
// qemu-img lets dirty pages pile up.
func TestImportInSmallMemoryCgroup(t *testing.T) {
	if testing.Short() {
		t.Skip("imports 1 GiB")
	}
	testimg.Need(t, "qemu-img", "zstd")
	dir := t.TempDir()
	raw := filepath.Join(dir, "big.raw")
	writeBigDisk(t, raw, 1<<30)
	zst := testimg.Compress(t, raw, "zst")
	q := testimg.Convert(t, raw, filepath.Join(dir, "big.qcow2"), "qcow2")
	qzst := testimg.Compress(t, q, "zst")
	vzst := testimg.Compress(t, testimg.Convert(t, raw, filepath.Join(dir, "big.vdi"), "vdi"), "zst")
	// Multi-block xz, as `xz -T0` writes: the xz child decodes it threaded
	// with a budget of half the cgroup's limit (format's
	// TestXZThreadsInCgroup checks the budget read inside a cgroup).
	testimg.Need(t, "xz")
	testimg.Run(t, "xz", "-k", "-T2", "--block-size=4MiB", raw)
	mtxz := raw + ".xz"
	want := testimg.Digest(t, raw, -1)
	bin := buildImporter(t, dir)
	loop := testimg.LoopDevice(t, dir, 1<<30+(16<<20))
	loopUsed := false // LoopDevice filled it with 0xA5 already

	for _, c := range []struct{ name, src, dest string }{
		{"raw.zst to file", zst, filepath.Join(dir, "out-raw.img")},
		{"raw.zst to device", zst, loop},
		{"qcow2.zst decoded to file", qzst, filepath.Join(dir, "out-qcow2.img")},
		{"qcow2.zst decoded to device", qzst, loop},
		{"vdi.zst via scratch to file", vzst, filepath.Join(dir, "out-vdi.img")},
		{"qcow2 to device", q, loop},
		{"multi-block raw.xz to device", mtxz, loop},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.dest == loop {
				if loopUsed {
					scribble(t, loop) // not the previous case's bytes
				}
				loopUsed = true
			}
			cg := newMemCgroup(t, memLimit)
			out, dirtyPeak, err := cg.run(bin, "-q", "--scratch", t.TempDir(), c.src, c.dest)
			require.NoError(t, err, string(out))
			// The peak counts clean page cache too (a scratch file kept
			// cached for qemu-img), which the kernel reclaims at the limit;
			// dirty pages are what cannot be dropped and get pods killed.
			t.Logf("%s: cgroup peak (RSS + page cache) %d MiB of %d MiB; peak dirty+writeback %d MiB",
				c.name, cg.peak(t)>>20, memLimit>>20, dirtyPeak>>20)
			assert.Zero(t, cg.oomKills(t))
			assert.Less(t, dirtyPeak, int64(dirtyPeakMost))
			assert.Equal(t, want, testimg.Digest(t, c.dest, 1<<30))
			if c.dest != loop {
				require.NoError(t, os.Remove(c.dest))
			}
		})
	}
}

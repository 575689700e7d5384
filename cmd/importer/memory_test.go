package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testkit/hostileimg"
	"github.com/diskimport/engine/internal/testkit/testimg"
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

// peakMost is memory.peak's ceiling for the routes without scratch: the
// limit less a margin, so an import that only survives by the kernel
// reclaiming at the limit fails too (a target written with O_DIRECT, or
// with paced writeback and dropped pages, should stay far below).
const peakMost = memLimit - 64<<20

// writePatternDisk writes a raw disk of size bytes that is quick to make
// and to compress yet not trivial: two MiB of every three are data, each
// MiB one random 4 KiB block repeated with a running counter stamped into
// every copy (so no two 4 KiB blocks of the disk are equal and no cluster
// is all zeros), the third MiB a hole.
func writePatternDisk(t *testing.T, p string, size int64) {
	f, err := os.Create(p)
	require.NoError(t, err)
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	rng := rand.New(rand.NewPCG(7, 11))
	seed := make([]byte, 4096)
	block := make([]byte, 1<<20)
	var counter uint64
	for off := int64(0); off < size; off += int64(len(block)) {
		if (off>>20)%3 == 2 {
			require.NoError(t, w.Flush())
			_, err := f.Seek(int64(len(block)), io.SeekCurrent)
			require.NoError(t, err)
			continue
		}
		for i := 0; i < len(seed); i += 8 {
			binary.LittleEndian.PutUint64(seed[i:], rng.Uint64())
		}
		for i := 0; i < len(block); i += len(seed) {
			copy(block[i:], seed)
			counter++
			binary.LittleEndian.PutUint64(block[i:], counter)
		}
		_, err := w.Write(block)
		require.NoError(t, err)
	}
	require.NoError(t, w.Flush())
	require.NoError(t, f.Truncate(size))
}

// serveWithoutRanges serves dir's files whole, with "Accept-Ranges: none"
// and a 200 to any Range request: a server the importer can only stream
// from, so a qcow2 or vmdk takes the stream-decode route.
func serveWithoutRanges(t *testing.T, dir string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(filepath.Join(dir, path.Base(r.URL.Path)))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Accept-Ranges", "none")
		w.Header().Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
		if r.Method == http.MethodHead {
			return
		}
		io.Copy(w, f)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/"
}

// scribble overwrites the whole device with 0xA5, so an import that leaves
// any part of it unwritten (a hole not zeroed, a cluster skipped) shows in
// the digest instead of passing on the previous case's bytes. O_DIRECT:
// buffered, a gigabyte through the device's page cache takes many seconds
// on a busy machine.
func scribble(t *testing.T, dev string) {
	f, err := os.OpenFile(dev, os.O_WRONLY|syscall.O_DIRECT, 0)
	require.NoError(t, err)
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	require.NoError(t, err)
	_, err = f.Seek(0, io.SeekStart)
	require.NoError(t, err)
	const chunk, align = 4 << 20, 4096
	mem := make([]byte, chunk+align)
	skip := int(-uintptr(unsafe.Pointer(&mem[0])) & (align - 1))
	buf := mem[skip : skip+chunk]
	for i := range buf {
		buf[i] = 0xA5
	}
	for off := int64(0); off < size; off += chunk {
		_, err := f.Write(buf[:min(chunk, size-off)])
		require.NoError(t, err)
	}
	require.NoError(t, f.Sync())
}

// resultJSON finds the result line --json printed among the output.
func resultJSON(t *testing.T, out []byte) map[string]any {
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "{") {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &m), line)
			return m
		}
	}
	t.Fatalf("no result JSON in the output:\n%s", out)
	return nil
}

// TestStreamRoutesInSmallMemoryCgroup runs the routes that take no scratch
// (issue 14) inside a 256 MiB memory cgroup on a 1 GiB disk with 683 MiB of
// data, over HTTP from 127.0.0.1: a qcow2.gz and a streamOptimized vmdk
// decoded from a server without ranges, a qcow2 read over ranges, and a
// raw.zst streamed, each onto a file and onto a loop device. Each must not
// be OOM-killed, keep memory.peak (page cache included) and dirty +
// writeback pages well under the limit, use no scratch, and write the
// disk's bytes exactly.
func TestStreamRoutesInSmallMemoryCgroup(t *testing.T) {
	if testing.Short() {
		t.Skip("imports 1 GiB eight times")
	}
	testimg.Need(t, "qemu-img", "zstd", "gzip")
	start := time.Now()
	dir := t.TempDir()
	srvDir := filepath.Join(dir, "srv")
	require.NoError(t, os.Mkdir(srvDir, 0o755))
	raw := filepath.Join(srvDir, "big.raw")
	const size = 1 << 30
	writePatternDisk(t, raw, size)
	want := testimg.Digest(t, raw, -1)
	q := testimg.Convert(t, raw, filepath.Join(srvDir, "big.qcow2"), "qcow2")
	testimg.Compress(t, q, "gz")
	testimg.Convert(t, raw, filepath.Join(srvDir, "big.vmdk"), "vmdk", "subformat=streamOptimized")
	testimg.Compress(t, raw, "zst")
	require.NoError(t, os.Remove(raw)) // the page cache it held is not the importer's
	bin := buildImporter(t, dir)
	loop := testimg.LoopDevice(t, dir, size+(16<<20))
	plain := serveWithoutRanges(t, srvDir)
	// The ranged server counts Range requests: the ranged case must read
	// by ranges, not fall back to streaming the whole file.
	ranged, rangeRequests := testimg.ServeCountingRanges(t, srvDir)
	loopUsed := false // LoopDevice filled it with 0xA5 already
	t.Logf("images, importer and loop device ready in %v", time.Since(start).Round(time.Millisecond))

	for _, c := range []struct{ name, src string }{
		{"qcow2.gz stream-decoded", plain + "big.qcow2.gz"},
		{"streamOptimized vmdk stream-decoded", plain + "big.vmdk"},
		{"qcow2 over ranges", ranged + "big.qcow2"},
		{"raw.zst streamed", plain + "big.raw.zst"},
	} {
		for _, dest := range []string{"file", "device"} {
			t.Run(c.name+" to "+dest, func(t *testing.T) {
				target := filepath.Join(dir, "out.img")
				if dest == "device" {
					target = loop
					if loopUsed {
						scribble(t, loop)
					}
					loopUsed = true
				}
				scratch := t.TempDir()
				cg := newMemCgroup(t, memLimit)
				rangeRequests.Store(0)
				t0 := time.Now()
				args := []string{"-q", "--json", "--scratch", scratch, c.src, target}
				if strings.HasPrefix(c.src, ranged) {
					// Onto a file the engine would decode this qcow2 as a
					// stream (the engine's route choice).
					args = append([]string{"--no-stream-decode"}, args...)
				}
				out, dirtyPeak, err := cg.run(bin, args...)
				require.NoError(t, err, string(out))
				peak := cg.peak(t)
				t.Logf("%s to %s in %v: cgroup peak (RSS + page cache) %d MiB of %d MiB; peak dirty+writeback %d MiB",
					c.name, dest, time.Since(t0).Round(time.Millisecond), peak>>20, memLimit>>20, dirtyPeak>>20)
				assert.Zero(t, cg.oomKills(t))
				assert.Less(t, peak, int64(peakMost))
				assert.Less(t, dirtyPeak, int64(dirtyPeakMost))
				if strings.HasPrefix(c.src, ranged) {
					assert.Greater(t, rangeRequests.Load(), int64(1), "the qcow2 was not read by ranges")
				}
				res := resultJSON(t, out)
				assert.Equal(t, false, res["scratchUsed"], "these routes take no scratch")
				left, err := os.ReadDir(scratch)
				require.NoError(t, err)
				assert.Empty(t, left)
				assert.Equal(t, want, testimg.Digest(t, target, size))
				if dest == "file" {
					require.NoError(t, os.Remove(target))
				}
			})
		}
	}
}

// writeHostile writes an image made by write to dir/name.
func writeHostile(t *testing.T, dir, name string, write func(f *os.File) error) string {
	t.Helper()
	p := filepath.Join(dir, name)
	f, err := os.Create(p)
	require.NoError(t, err)
	require.NoError(t, write(f))
	require.NoError(t, f.Close())
	return p
}

// TestHostileImagesInSmallMemoryCgroup imports, inside a 256 MiB memory
// cgroup, images made to cost a stream decoder far more than their size
// (issue 21): a 2 MB .xz streamOptimized vmdk naming 15 million grains
// in tables ahead of them, a 1 MB .xz dynamic VHD whose block table
// names 3.3 million blocks, and a 16 MiB-disk qcow2 .zst of 14 KB with
// 256 MiB of bytes no table refers to before its refcount table (a
// decoder keeping bytes while any table is to come spills them all), or
// before its L2 table (which may claim them, so they are held, but not
// past the disk's size). None may be OOM-killed or let memory.peak near
// the limit; the unreferenced filler must not be spilled at all, and the
// filler before the L2 table not past the disk's size, the import of
// that one-time stream failing instead.
func TestHostileImagesInSmallMemoryCgroup(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the importer and decodes images of 60 to 270 MiB")
	}
	testimg.Need(t, "xz", "zstd")
	dir := t.TempDir()
	srv := filepath.Join(dir, "srv")
	require.NoError(t, os.Mkdir(srv, 0o755))
	const vsize = 16 << 20
	disk, clusters := hostileimg.Disk(vsize>>16, 3)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "disk.raw"), disk, 0o644))
	want := testimg.Digest(t, filepath.Join(dir, "disk.raw"), -1)
	qcow2 := func(name string, l2After bool) string {
		return writeHostile(t, srv, name, func(f *os.File) error {
			_, err := hostileimg.QCOW2{VirtualSize: vsize, Clusters: clusters, Filler: 256 << 20, L2AfterFiller: l2After}.WriteTo(f)
			return err
		})
	}
	images := map[string]string{
		"vmdk": testimg.Compress(t, writeHostile(t, srv, "ahead.vmdk", func(f *os.File) error {
			return hostileimg.VMDKTablesAhead(f, 30000)
		}), "xz"),
		"vhd": testimg.Compress(t, writeHostile(t, srv, "blocks.vhd", func(f *os.File) error {
			return hostileimg.VHDManyBlocks(f, 1<<30, 64<<20/20)
		}), "xz"),
		"filler":  testimg.Compress(t, qcow2("filler.qcow2", false), "zst"),
		"late-l2": testimg.Compress(t, qcow2("late.qcow2", true), "zst"),
	}
	for k, p := range images {
		st, err := os.Stat(p)
		require.NoError(t, err)
		t.Logf("%s: %s of %d bytes", k, filepath.Base(p), st.Size())
	}
	bin := buildImporter(t, dir)
	plain := serveWithoutRanges(t, srv)

	for _, c := range []struct {
		name, image string
		stdin       bool
		reason      string // "" for success
	}{
		{"vmdk.xz grain tables ahead of 15 million grains", "vmdk", false, "InvalidImage"},
		{"vhd.xz block table of 3.3 million blocks", "vhd", false, "InvalidImage"},
		{"qcow2.zst 256 MiB no table refers to", "filler", false, ""},
		{"qcow2.zst 256 MiB before its L2 table from stdin", "late-l2", true, "Failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			target := filepath.Join(t.TempDir(), "out.img")
			scratch := t.TempDir()
			cg := newMemCgroup(t, memLimit)
			src := plain + filepath.Base(images[c.image])
			var stdin *os.File
			if c.stdin {
				var err error
				stdin, err = os.Open(images[c.image])
				require.NoError(t, err)
				defer stdin.Close()
				src = "-"
			}
			t0 := time.Now()
			out, _, err := cg.runStdin(stdin, bin, "-q", "--json", "--scratch", scratch, src, target)
			peak := cg.peak(t)
			t.Logf("cgroup peak %d MiB of %d MiB, %d processes OOM-killed", peak>>20, memLimit>>20, cg.oomKills(t))
			require.Zero(t, cg.oomKills(t))
			res := resultJSON(t, out)
			t.Logf("%s in %v: scratch used %v (%v bytes): %s",
				c.name, time.Since(t0).Round(time.Millisecond), res["scratchUsed"], res["scratchBytes"], res["message"])
			assert.Less(t, peak, int64(peakMost))
			if c.reason == "" {
				require.NoError(t, err, string(out))
				assert.Equal(t, false, res["scratchUsed"], "bytes no table refers to were spilled")
				assert.Equal(t, want, testimg.Digest(t, target, vsize))
				return
			}
			require.Error(t, err, "the import succeeded")
			assert.Equal(t, c.reason, res["reason"])
			if n, ok := res["scratchBytes"].(float64); ok {
				assert.LessOrEqual(t, n, float64(vsize), "spilled more than the disk's size")
			}
		})
	}
}

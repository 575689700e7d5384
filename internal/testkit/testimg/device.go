package testimg

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// LoopDevice attaches a loop device over a new sparse file of size bytes
// filled with a 0xA5 pattern (so unwritten zeros show), and detaches it when
// the test ends. It skips when not root or without losetup.
func LoopDevice(t testing.TB, dir string, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loop devices need root")
	}
	Need(t, "losetup")
	backing := filepath.Join(dir, fmt.Sprintf("loop-%d.img", rand.Uint32()))
	f, err := os.Create(backing)
	if err != nil {
		t.Fatal(err)
	}
	pattern := bytes.Repeat([]byte{0xA5}, 1<<20)
	for off := int64(0); off < size; off += int64(len(pattern)) {
		if _, err := f.Write(pattern[:min(int64(len(pattern)), size-off)]); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	return AttachLoop(t, backing, "--direct-io=on")
}

// LoopDeviceIfRoot is LoopDevice for the loop argument of ForEachTarget:
// "" without root, so the block subtests skip and the file ones still run.
func LoopDeviceIfRoot(t testing.TB, dir string, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		return ""
	}
	return LoopDevice(t, dir, size)
}

// AttachLoop attaches a loop device over the file backing, with losetup's
// flags (such as --direct-io=on or --read-only), and detaches it when the
// test ends. It skips when not root, without losetup, or when no loop
// device can be attached.
func AttachLoop(t testing.TB, backing string, flags ...string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loop devices need root")
	}
	Need(t, "losetup")
	args := append(append([]string{"-f", "--show"}, flags...), backing)
	out, err := exec.Command("losetup", args...).CombinedOutput()
	if err != nil {
		t.Skipf("losetup failed (no free loop device?): %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("detaching %s: %v %s", dev, err, out)
		}
	})
	return dev
}

// DetachLoopsWhenDone detaches, when the test ends, every loop device
// still attached over backing: for a device a script the test runs
// attaches itself (an example in the docs), which may fail before its own
// losetup -d.
func DetachLoopsWhenDone(t testing.TB, backing string) {
	t.Cleanup(func() {
		out, err := exec.Command("losetup", "-j", backing).Output()
		if err != nil {
			return
		}
		for line := range strings.Lines(string(out)) {
			if dev, _, ok := strings.Cut(line, ":"); ok && dev != "" {
				if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
					t.Errorf("detaching %s: %v %s", dev, err, out)
				}
			}
		}
	})
}

// AddPartition adds partition n to dev, a loop device attached with
// losetup's -P (partitions allowed), over sectors 512-byte sectors from
// start (addpart: BLKPG, which needs no partition table the kernel can
// parse; this kernel parses none), and returns its node once devtmpfs made
// it (waited for up to 10 s). The partition goes when the test ends.
func AddPartition(t testing.TB, dev string, n int, start, sectors int64) string {
	t.Helper()
	Need(t, "addpart")
	if out, err := exec.Command("addpart", dev, strconv.Itoa(n), strconv.FormatInt(start, 10), strconv.FormatInt(sectors, 10)).CombinedOutput(); err != nil {
		t.Fatalf("addpart %s %d: %v %s", dev, n, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("delpart", dev, strconv.Itoa(n)).CombinedOutput(); err != nil {
			t.Errorf("delpart %s %d: %v %s", dev, n, err, out)
		}
	})
	node := fmt.Sprintf("%sp%d", dev, n)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ok, _ := isBlock(node); ok {
			return node
		}
		if time.Now().After(deadline) {
			t.Fatalf("partition %d of %s: no node %s after 10 s", n, dev, node)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func isBlock(path string) (bool, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0, nil
}

// WriteDevice writes the content of file to the start of dev and syncs it
// (a device that holds data, to show what an import overwrites or leaves).
func WriteDevice(t testing.TB, dev, file string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(dev, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// Tmpfs mounts a tmpfs of size bytes on a new directory, unmounted at
// cleanup: a destination whose free space is known exactly, and where
// holes take no memory. It skips without root or where mounting fails.
func Tmpfs(t testing.TB, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+strconv.FormatInt(size, 10), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// Target is where one run of an import test writes: a file, or a block
// device.
type Target struct {
	Path  string // a new file's path in the subtest's temporary directory, or the loop device
	Block bool   // Path is the loop device
}

// ForEachTarget runs f as the subtests name/file and name/block (just file
// and block when name is ""): the first onto a file in a new temporary
// directory, the second onto a new loop device of deviceSize bytes (as
// LoopDevice makes it: 0xA5 everywhere, so what an import left unwritten
// shows, and no earlier subtest's image can stand in for this one's),
// skipped without root.
func ForEachTarget(t *testing.T, name string, deviceSize int64, f func(t *testing.T, tg Target)) {
	t.Helper()
	for _, block := range []bool{false, true} {
		sub := map[bool]string{false: "file", true: "block"}[block]
		if name != "" {
			sub = name + "/" + sub
		}
		t.Run(sub, func(t *testing.T) {
			if !block {
				f(t, Target{Path: filepath.Join(t.TempDir(), "disk.img")})
				return
			}
			f(t, Target{Path: LoopDevice(t, t.TempDir(), deviceSize), Block: true})
		})
	}
}

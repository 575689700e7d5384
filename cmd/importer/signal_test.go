package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testkit/testimg"
)

// SIGTERM in the middle of a slow download: the binary stops, exits 143
// (128 + SIGTERM), says "cancelled", leaves no target and no scratch file.
// The signal goes once the server sent its first chunk (not after a guessed
// 1.5 s), and the download would take over two minutes, so a binary that
// ended on its own before the one-minute guard stopped on the signal: no
// stopwatch.
func TestBinarySIGTERMMidImport(t *testing.T) {
	dir, bin := builtImporter(t, "qemu-img", "gzip")
	raw, q := testimg.RawAndQCOW2(t, dir, 8<<20, 51)
	for _, img := range []string{raw, testimg.Compress(t, q, "gz")} {
		t.Run(filepath.Base(img), func(t *testing.T) {
			data, err := os.ReadFile(img)
			require.NoError(t, err)
			// 64 KiB a second: the transfer would take over two minutes.
			srv, sending := pacedServerSending(t, data, 64<<10, time.Second, 0)
			scratch := t.TempDir()
			destDir := t.TempDir()
			dest := filepath.Join(destDir, "disk.img")
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(bin, "--json", "--scratch", scratch, srv.URL+"/img", dest)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { cmd.Process.Kill() })
			waitSending(t, sending)
			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatal("the importer did not stop within a minute of SIGTERM")
			}
			t.Logf("stderr: %s", stderr.String())
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, exitTerminated, ee.ExitCode())
			msg := decode(t, stdout.Bytes())
			assert.Contains(t, msg.Message, "cancelled")
			ents, _ := os.ReadDir(scratch)
			assert.Empty(t, ents, "scratch files left")
			ents, _ = os.ReadDir(destDir)
			assert.Empty(t, ents, "target files left")
		})
	}
}

// Ctrl-C (SIGINT) in the middle of a slow download: exit 130, nothing left
// behind.
func TestBinarySIGINTExits130(t *testing.T) {
	_, bin := builtImporter(t)
	srv, sending := pacedServerSending(t, bytes.Repeat([]byte{7}, 16<<20), 64<<10, 50*time.Millisecond, 0)
	destDir := t.TempDir()
	var stderr bytes.Buffer
	cmd := exec.Command(bin, srv.URL+"/disk.img", filepath.Join(destDir, "disk.img"))
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill() })
	waitSending(t, sending)
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	err := cmd.Wait()
	t.Logf("stderr: %s", stderr.String())
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, exitInterrupted, ee.ExitCode())
	assert.Contains(t, stderr.String(), "cancelled")
	ents, _ := os.ReadDir(destDir)
	assert.Empty(t, ents, "target files left")
}

// waitSending waits until a paced server sent its first chunk (the bound is
// only for an importer that never asks; it returns as soon as one does).
func waitSending(t *testing.T, sending <-chan struct{}) {
	t.Helper()
	select {
	case <-sending:
	case <-time.After(time.Minute):
		t.Fatal("the importer did not start its download within a minute")
	}
}

func TestInterruptedCode(t *testing.T) {
	assert.Equal(t, 130, interruptedCode(1, true, os.Interrupt))
	assert.Equal(t, 143, interruptedCode(1, true, syscall.SIGTERM))
	assert.Equal(t, 0, interruptedCode(0, true, syscall.SIGTERM), "CDI's scratch-space-required result stays 0")
	assert.Equal(t, 0, interruptedCode(0, true, os.Interrupt), "finished before the signal landed")
	assert.Equal(t, 1, interruptedCode(1, false, nil))
}

// SIGKILL of the importer at any moment of a qcow2 conversion onto a block
// device leaves neither the image's first MiB (its boot sector) nor the
// device's old one: the old head is zeroed before the first write,
// qemu-img writes through our NBD export, which holds the image's head in
// our memory until the rest is written and synced, and qemu-img dies with
// us (Pdeathsig). Kills land when the writes to the device pass 10%, 50%
// and 90% of the image, and just after qemu-img convert has exited (before
// or after the head went out; if after, the device must hold the whole
// image).
func TestBinarySIGKILLDuringConvertLeavesNoBootSector(t *testing.T) {
	dir, bin := builtImporter(t, "qemu-img")
	const size = 256 << 20
	raw, q := bootableImages(t, dir, "disk", size, 90)
	loop := testimg.LoopDevice(t, dir, size) // 0xA5 everywhere
	seedHead := filepath.Join(dir, "seed-head")
	require.NoError(t, os.WriteFile(seedHead, bytes.Repeat([]byte{0xA5}, 1<<20), 0o600))
	imageHead := testimg.Digest(t, raw, 1<<20)
	// A short TMPDIR of our own for the export's socket directory, which a
	// killed importer cannot remove (a t.TempDir path is too long for a
	// socket, and the importer would fall back to /tmp).
	sockDir, err := os.MkdirTemp("/tmp", "killtest-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(sockDir) })

	for _, moment := range []string{"10%", "50%", "90%", "qemu-img exited"} {
		t.Run(moment, func(t *testing.T) {
			testimg.WriteDevice(t, loop, seedHead)
			cmd := exec.Command(bin, "-v", q, loop)
			cmd.Env = append(os.Environ(), "TMPDIR="+sockDir)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			wait := startReaped(t, cmd)
			var at string
			if moment == "qemu-img exited" {
				at = killAfterConvertExits(t, cmd.Process.Pid, q)
			} else {
				frac, err := strconv.ParseFloat(strings.TrimSuffix(moment, "%"), 64)
				require.NoError(t, err)
				at = signalAtWritten(t, cmd.Process.Pid, loop, deviceWritten(t, loop), int64(frac/100*size), syscall.SIGKILL)
			}
			err := wait()
			t.Logf("killed %s; exit: %v; stderr tail: %s", at, err, tail(stderr.String(), 600))
			if moment == "qemu-img exited" && err == nil {
				// The importer wrote the head, synced and exited in the
				// milliseconds between qemu-img's exit and the kill (seen
				// on a busy machine): then it must have left the whole image.
				t.Log("the importer finished before the kill landed")
				assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, loop, size), "reported complete but the image is incomplete")
				return
			}
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "the importer finished before it was killed")
			ws, _ := ee.Sys().(syscall.WaitStatus)
			require.Equal(t, syscall.SIGKILL, ws.Signal())
			waitQemuImgGone(t, q)

			head := testimg.Digest(t, loop, 1<<20)
			if moment == "qemu-img exited" && head == imageHead {
				// Killed after the head went out: then the rest was
				// already synced, so the device holds the whole image.
				t.Log("the kill came after the head was written")
				assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, loop, size), "head written but the image is incomplete")
				return
			}
			assert.NotEqual(t, imageHead, head, "the image's first MiB is on the device")
			testimg.AssertZeros(t, loop, 0, 1<<20)
		})
	}
}

// bootableImages writes into dir a raw disk of size bytes from seed whose
// first sector looks like an MBR (NAME.raw), and its qcow2 conversion
// (NAME.qcow2).
func bootableImages(t *testing.T, dir, name string, size int64, seed uint64) (raw, qcow2 string) {
	t.Helper()
	raw = testimg.Raw(t, dir, name+".raw", size, seed)
	writeBootSector(t, raw)
	return raw, testimg.Convert(t, raw, filepath.Join(dir, name+".qcow2"), "qcow2")
}

// writeBootSector makes the image's first sector look like an MBR.
func writeBootSector(t *testing.T, raw string) {
	t.Helper()
	f, err := os.OpenFile(raw, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	mbr := make([]byte, 512)
	copy(mbr, "\xeb\x63\x90TEST-BOOT-SECTOR")
	mbr[510], mbr[511] = 0x55, 0xAA
	_, err = f.WriteAt(mbr, 0)
	require.NoError(t, err)
}

// deviceWritten returns the bytes written to the block device dev so far
// (sectors written, the 7th field of its stat file).
func deviceWritten(t *testing.T, dev string) int64 {
	t.Helper()
	b, err := os.ReadFile("/sys/block/" + filepath.Base(dev) + "/stat")
	require.NoError(t, err)
	f := strings.Fields(string(b))
	require.Greater(t, len(f), 6)
	sectors, err := strconv.ParseInt(f[6], 10, 64)
	require.NoError(t, err)
	return sectors * 512
}

// killAfterConvertExits waits for a qemu-img convert of image to appear
// and then to exit, and SIGKILLs pid at once: the importer is then between
// qemu-img's end and its commit.
func killAfterConvertExits(t *testing.T, pid int, image string) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	seen := false
	for time.Now().Before(deadline) {
		running := qemuImgConverting(image)
		if running {
			seen = true
		} else if seen {
			require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
			return "right after qemu-img convert exited"
		}
		time.Sleep(200 * time.Microsecond)
	}
	t.Fatal("timed out")
	return ""
}

// waitQemuImgGone waits until no qemu-img converts image any more: it dies
// by Pdeathsig with the importer.
func waitQemuImgGone(t *testing.T, image string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // returns as soon as it is gone
	for time.Now().Before(deadline) {
		if !qemuImgConverting(image) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Error("qemu-img still running a minute after the importer was killed")
}

// qemuImgConverting reports whether a qemu-img convert of image runs.
func qemuImgConverting(image string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(cmdline, []byte("qemu-img")) &&
			bytes.Contains(cmdline, []byte("\x00convert\x00")) && bytes.Contains(cmdline, []byte(image)) {
			return true
		}
	}
	return false
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// startReaped starts cmd and returns its Wait; a cmd the test has not
// waited for when it ends is killed and reaped.
func startReaped(t *testing.T, cmd *exec.Cmd) (wait func() error) {
	require.NoError(t, cmd.Start())
	waited := false
	t.Cleanup(func() {
		if !waited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return func() error {
		err := cmd.Wait()
		waited = true
		return err
	}
}

// builtImporter builds this program into a new directory for a test that
// runs it, and returns both; it skips the test in -short mode or when one
// of tools is missing.
func builtImporter(t *testing.T, tools ...string) (dir, bin string) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	testimg.Need(t, tools...)
	dir = t.TempDir()
	return dir, buildImporter(t, dir)
}

// buildImporter builds this program into dir, for the tests that run it as
// a process.
func buildImporter(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "importer")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, string(out))
	return bin
}

// signalAtWritten sends sig to pid once the device has taken n more bytes
// of writes than at start (the kernel's count).
func signalAtWritten(t *testing.T, pid int, dev string, start, n int64, sig syscall.Signal) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if w := deviceWritten(t, dev) - start; w >= n {
			require.NoError(t, syscall.Kill(pid, sig))
			return fmt.Sprintf("%v after %d bytes written to the device", sig, w)
		}
		if err := syscall.Kill(pid, 0); err != nil {
			t.Fatalf("importer %d gone before %d bytes were written", pid, n)
		}
		time.Sleep(200 * time.Microsecond)
	}
	t.Fatal("timed out")
	return ""
}

// An import of image B onto a device that held a bootable-looking image A
// (MBR signature, GPT with its backup header at the end), cut off after
// writing began, leaves the first MiB all zeros and no backup GPT: a
// SIGINT and a SIGKILL mid-transfer from a slow server, a truncated qcow2
// streamed, and a server that drops the connection and refuses to resume.
// A truncated local qcow2 is refused before the first write and leaves A
// whole. Where the
// cut came after raw data went out, B's bytes are behind the zeroed head
// (without the zeroing, A's head would sit in front of them). A complete
// import leaves exactly B: the device's sha256 is B's.
func TestBinaryCutOffImportLeavesNoMixOfImages(t *testing.T) {
	dir, bin := builtImporter(t, "qemu-img")
	const size = 32 << 20
	rawPath, qPath := bootableImages(t, dir, "b", size, 77)
	raw, err := os.ReadFile(rawPath)
	require.NoError(t, err)
	qcow, err := os.ReadFile(qPath)
	require.NoError(t, err)
	truncated := filepath.Join(dir, "truncated.qcow2")
	require.NoError(t, os.WriteFile(truncated, qcow[:len(qcow)*2/3], 0o644))
	loop := testimg.LoopDevice(t, dir, size)

	type cutoff struct {
		url    func(t *testing.T) string
		signal syscall.Signal // 0: the import fails by itself
		rawAt  bool           // B's raw bytes [1 MiB, 2 MiB) are on the device afterwards
		exit   int
		// refused before its first write: A is left whole
		untouched bool
	}
	slowRaw := func(t *testing.T) string {
		return pacedServer(t, raw, 128<<10, 20*time.Millisecond, 0).URL + "/b.raw"
	}
	cases := map[string]cutoff{
		"SIGINT mid-transfer":  {url: slowRaw, signal: syscall.SIGINT, rawAt: true, exit: exitInterrupted},
		"SIGKILL mid-transfer": {url: slowRaw, signal: syscall.SIGKILL, rawAt: true, exit: -1},
		"truncated qcow2": {url: func(t *testing.T) string {
			return pacedServer(t, qcow[:len(qcow)*2/3], 1<<20, 0, 0).URL + "/b.qcow2"
		}, exit: 1},
		"truncated qcow2 file": {url: func(*testing.T) string { return truncated }, exit: 1, untouched: true},
		"dropped, resume refused": {url: func(t *testing.T) string {
			return pacedServer(t, raw, 1<<20, 0, 12<<20).URL + "/b.raw"
		}, rawAt: true, exit: 1},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			testimg.BootableGPT(t, loop, 512)
			require.True(t, testimg.HasBootSignature(t, loop))
			require.True(t, testimg.HasBackupGPT(t, loop))
			old := testimg.Digest(t, loop, -1)
			start := deviceWritten(t, loop)
			var stderr bytes.Buffer
			cmd := exec.Command(bin, "--retries", "2", c.url(t), loop)
			cmd.Stderr = &stderr
			wait := startReaped(t, cmd)
			at := "no signal"
			if c.signal != 0 {
				// Past the zeroing (1 MiB at each end) B's data is going out.
				at = signalAtWritten(t, cmd.Process.Pid, loop, start, 4<<20, c.signal)
			}
			err := wait()
			t.Logf("%s; exit: %v; stderr tail: %s", at, err, tail(stderr.String(), 400))
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, c.exit, ee.ExitCode())
			if c.untouched {
				assert.Equal(t, old, testimg.Digest(t, loop, -1), "refused before writing, yet the device changed")
				return
			}
			testimg.AssertZeros(t, loop, 0, 1<<20)
			assert.False(t, testimg.HasBootSignature(t, loop), "the device looks bootable")
			assert.False(t, testimg.HasBackupGPT(t, loop), "the old backup GPT is still at the end")
			if c.rawAt {
				got := make([]byte, 1<<20)
				f, err := os.Open(loop)
				require.NoError(t, err)
				_, err = f.ReadAt(got, 1<<20)
				f.Close()
				require.NoError(t, err)
				assert.True(t, bytes.Equal(raw[1<<20:2<<20], got), "B's second MiB is not on the device: writing had not begun")
			}
		})
	}

	want := testimg.Digest(t, rawPath, -1)
	for name, src := range map[string]func(t *testing.T) string{
		"raw over HTTP":   func(t *testing.T) string { return pacedServer(t, raw, 1<<20, 0, 0).URL + "/b.raw" },
		"qcow2 over HTTP": func(t *testing.T) string { return pacedServer(t, qcow, 1<<20, 0, 0).URL + "/b.qcow2" },
		"qcow2 file":      func(*testing.T) string { return qPath },
	} {
		t.Run("complete/"+name, func(t *testing.T) {
			testimg.BootableGPT(t, loop, 512)
			out, err := exec.Command(bin, src(t), loop).CombinedOutput()
			require.NoError(t, err, tail(string(out), 400))
			assert.Equal(t, want, testimg.Digest(t, loop, -1), "the device is not exactly B")
		})
	}
}

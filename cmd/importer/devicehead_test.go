package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testimg"
)

// headTestServer serves data with its Content-Length and no ranges, paced
// at chunk bytes every delay (0: at once). With dropAt > 0 the first
// request's connection is cut after dropAt bytes and every later request
// (a resume or a restart) is refused with 403.
func headTestServer(t *testing.T, data []byte, chunk int, delay time.Duration, dropAt int) *httptest.Server {
	t.Helper()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if dropAt > 0 && requests.Add(1) > 1 {
			http.Error(w, "no second chance", http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		end := len(data)
		if dropAt > 0 {
			end = dropAt
		}
		for off := 0; off < end; off += chunk {
			if _, err := w.Write(data[off:min(off+chunk, end)]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			if delay > 0 {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(delay):
				}
			}
		}
		if dropAt > 0 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.(*net.TCPConn).SetLinger(0)
				conn.Close()
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv
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
	if testing.Short() {
		t.Skip("builds the binary")
	}
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	const size = 32 << 20
	rawPath := testimg.Raw(t, dir, "b.raw", size, 77)
	writeBootSector(t, rawPath)
	raw, err := os.ReadFile(rawPath)
	require.NoError(t, err)
	qPath := testimg.Convert(t, rawPath, filepath.Join(dir, "b.qcow2"), "qcow2")
	qcow, err := os.ReadFile(qPath)
	require.NoError(t, err)
	truncated := filepath.Join(dir, "truncated.qcow2")
	require.NoError(t, os.WriteFile(truncated, qcow[:len(qcow)*2/3], 0o644))
	loop := testimg.LoopDevice(t, dir, size)
	bin := buildImporter(t, dir)

	type cutoff struct {
		url    func(t *testing.T) string
		signal syscall.Signal // 0: the import fails by itself
		rawAt  bool           // B's raw bytes [1 MiB, 2 MiB) are on the device afterwards
		exit   int
		// refused before its first write: A is left whole
		untouched bool
	}
	slowRaw := func(t *testing.T) string {
		return headTestServer(t, raw, 128<<10, 20*time.Millisecond, 0).URL + "/b.raw"
	}
	cases := map[string]cutoff{
		"SIGINT mid-transfer":  {url: slowRaw, signal: syscall.SIGINT, rawAt: true, exit: exitInterrupted},
		"SIGKILL mid-transfer": {url: slowRaw, signal: syscall.SIGKILL, rawAt: true, exit: -1},
		"truncated qcow2": {url: func(t *testing.T) string {
			return headTestServer(t, qcow[:len(qcow)*2/3], 1<<20, 0, 0).URL + "/b.qcow2"
		}, exit: 1},
		"truncated qcow2 file": {url: func(*testing.T) string { return truncated }, exit: 1, untouched: true},
		"dropped, resume refused": {url: func(t *testing.T) string {
			return headTestServer(t, raw, 1<<20, 0, 12<<20).URL + "/b.raw"
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
			require.NoError(t, cmd.Start())
			waited := false
			t.Cleanup(func() {
				if !waited {
					cmd.Process.Kill()
					cmd.Wait()
				}
			})
			at := "no signal"
			if c.signal != 0 {
				// Past the zeroing (1 MiB at each end) B's data is going out.
				at = signalAtWritten(t, cmd.Process.Pid, loop, start, 4<<20, c.signal)
			}
			err := cmd.Wait()
			waited = true
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
		"raw over HTTP":   func(t *testing.T) string { return headTestServer(t, raw, 1<<20, 0, 0).URL + "/b.raw" },
		"qcow2 over HTTP": func(t *testing.T) string { return headTestServer(t, qcow, 1<<20, 0, 0).URL + "/b.qcow2" },
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

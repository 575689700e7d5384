package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testimg"
)

// SIGTERM in the middle of a slow download: the binary stops within a few
// seconds, exits 143 (128 + SIGTERM), says "cancelled", leaves no target and no scratch file.
func TestBinarySIGTERMMidImport(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	testimg.Need(t, "qemu-img", "gzip")
	dir := t.TempDir()
	bin := filepath.Join(dir, "importer")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, string(out))
	raw := testimg.Raw(t, dir, "disk.raw", 8<<20, 51)
	q := testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2")
	for _, img := range []string{raw, testimg.Compress(t, q, "gz")} {
		t.Run(filepath.Base(img), func(t *testing.T) {
			data, err := os.ReadFile(img)
			require.NoError(t, err)
			// 64 KiB every 50 ms: the transfer would take many seconds.
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(len(data)))
				for off := 0; off < len(data); off += 64 << 10 {
					if _, err := w.Write(data[off:min(off+64<<10, len(data))]); err != nil {
						return
					}
					w.(http.Flusher).Flush()
					select {
					case <-r.Context().Done():
						return
					case <-time.After(50 * time.Millisecond):
					}
				}
			}))
			t.Cleanup(srv.Close)
			scratch := t.TempDir()
			destDir := t.TempDir()
			dest := filepath.Join(destDir, "disk.img")
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(bin, "--json", "--scratch", scratch, srv.URL+"/img", dest)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { cmd.Process.Kill() })
			time.Sleep(1500 * time.Millisecond)
			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			sent := time.Now()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the importer did not stop within 10 s of SIGTERM")
			}
			stopped := time.Since(sent)
			t.Logf("stopped %s after SIGTERM; stderr: %s", stopped, stderr.String())
			assert.Less(t, stopped, 3*time.Second)
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

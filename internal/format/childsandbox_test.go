package format

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/sandbox"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// procLimit reads one soft limit ("Max open files") of pid from
// /proc/pid/limits.
func procLimit(t *testing.T, pid int, name string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok {
			return strings.Fields(rest)[0]
		}
	}
	t.Fatalf("no %q in /proc/%d/limits", name, pid)
	return ""
}

// TestDecompressorChildIsConfined looks at a running xz, igzip or
// diskimport-inflate child from
// outside: the decompressor itself (exec'd in place by the launcher), in a
// process group of its own, restricted (no_new_privs, set only to take on
// the Landlock ruleset), with its limits. What the ruleset denies is shown
// in internal/sandbox by TestPipeFilterOpensNoFile, with the same policy.
func TestDecompressorChildIsConfined(t *testing.T) {
	raw := variedContent(8<<20, 41)
	dir := t.TempDir()
	p := filepath.Join(dir, "d")
	writeRaw(t, p, raw)
	cases := map[string]struct {
		c       Compression
		o       func(bin string) Options
		tool    string
		as      uint64
		nproc   string
		threads bool
	}{
		"xz": {XZ, func(bin string) Options { return Options{ExternalXZ: bin, InflateChild: "-"} }, "xz", 0, "", true},
		"diskimport-inflate xz": {XZ, func(bin string) Options { return Options{InflateChild: bin} }, "diskimport-inflate",
			0, "", true},
		"igzip": {Gzip, func(bin string) Options { return Options{ExternalGzip: bin, InflateChild: "-"} }, "igzip",
			igzipAddressSpace, "1", false},
		"diskimport-inflate": {Gzip, func(bin string) Options { return Options{InflateChild: bin} }, "diskimport-inflate",
			inflateGzipAddressSpace, "1", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var bin string
			if tc.tool == "diskimport-inflate" {
				if bin = testimg.InflateChild(t); bin == "" {
					t.Skip("diskimport-inflate is not here (see the log above)")
				}
			} else {
				bin = needTool(t, tc.tool)
			}
			z, err := os.ReadFile(wrap(t, p, tc.c))
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// Read no further than 1 MiB of the 8: the child stays there to
			// look at, blocked writing into the full pipe.
			o := tc.o(bin).withDefaults()
			d, err := NewDecompressor(ctx, tc.c, bytes.NewReader(z), o)
			require.NoError(t, err)
			defer d.Close()
			_, err = io.CopyN(io.Discard, d, 1<<20)
			require.NoError(t, err)
			child := d.(*decoder).r.(*childProc).child
			pid := child.Pid()

			exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
			require.NoError(t, err)
			want, err := filepath.EvalSymlinks(bin)
			require.NoError(t, err)
			assert.Equal(t, want, exe, "the launcher execs the decompressor in place")
			pgid, err := syscall.Getpgid(pid)
			require.NoError(t, err)
			assert.Equal(t, pid, pgid, "own process group")
			status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			require.NoError(t, err)
			if sandbox.ABI() > 0 {
				assert.Contains(t, string(status), "NoNewPrivs:\t1")
			}
			assert.Equal(t, "16", procLimit(t, pid, "Max open files"))
			as := tc.as
			if tc.threads {
				threads, _, _ := xzThreadsHere()
				as = xzAddressSpace(o, threads)
				if tc.tool == "diskimport-inflate" {
					as = xzRingAddressSpace(o, threads)
					if threads == 1 {
						tc.nproc = "1" // no thread is started, so none may be
					}
				}
			}
			assert.Equal(t, fmt.Sprint(as), procLimit(t, pid, "Max address space"))
			if tc.nproc != "" {
				assert.Equal(t, tc.nproc, procLimit(t, pid, "Max processes"))
			}
			env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			require.NoError(t, err)
			assert.Equal(t, "LC_ALL=C\x00", string(env), "the whole environment")

			cancel()
			_, err = io.Copy(io.Discard, d)
			require.Error(t, err)
			require.NoError(t, d.Close())
			assert.True(t, child.Reaped())
		})
	}
}

// The launcher execs absolute paths: a bare ExternalXZ name is looked up
// on PATH first.
func TestExternalToolByBareName(t *testing.T) {
	needTool(t, "xz")
	raw := variedContent(1<<20, 42)
	p := filepath.Join(t.TempDir(), "d")
	writeRaw(t, p, raw)
	z, err := os.ReadFile(wrap(t, p, XZ))
	require.NoError(t, err)
	d, err := NewDecompressor(context.Background(), XZ, bytes.NewReader(z), Options{ExternalXZ: "xz", InflateChild: "-"}.withDefaults())
	require.NoError(t, err)
	defer d.Close()
	got, err := io.ReadAll(d)
	require.NoError(t, err)
	require.True(t, bytes.Equal(raw, got))
}

package importer_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
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

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// Faults caused for real: a target or scratch filesystem that fills up, a
// scratch directory that is missing, a block device that is mounted or held
// open by another process, and qemu-img killed in the middle of a convert.

// A target filesystem that fills up: the size check passes when the import
// starts, then another writer takes the space (a hog file written as the
// write phase begins) and the writes hit ENOSPC. The error must say so and
// nothing of ours may be left behind.
func TestTargetFillsUp(t *testing.T) {
	testimg.Need(t, "qemu-img", "zstd")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 6<<20, 41)
	zst := testimg.Compress(t, raw, "zst")
	q := testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2")
	for _, src := range []string{raw, zst, q} {
		t.Run(filepath.Base(src), func(t *testing.T) {
			fs := testimg.Tmpfs(t, 8<<20)
			require.NoError(t, os.Mkdir(filepath.Join(fs, "t"), 0o755))
			target := filepath.Join(fs, "t", "disk.img")
			hog := func(phase importer.Phase, step func(context.Context) error) func(context.Context) error {
				if phase != importer.PhaseTransferDataFile && phase != importer.PhaseConvert {
					return step
				}
				return func(ctx context.Context) error {
					f, err := os.Create(filepath.Join(fs, "hog"))
					require.NoError(t, err)
					f.Write(make([]byte, 5<<20))
					f.Close()
					return step(ctx)
				}
			}
			err := importFailsWith(t, importer.WithPhaseHook(importer.Options{Source: src, Target: target}, hog))
			assert.ErrorIs(t, err, importer.ErrTargetTooSmall)
			assert.True(t, strings.Contains(strings.ToLower(err.Error()), "no space left on device") || errors.Is(err, importer.ErrTargetTooSmall),
				"error does not name the full filesystem: %v", err)
			assertEmptyDir(t, filepath.Join(fs, "t"))
		})
	}
}

// importFailsWith runs an import that must fail (any cause), leaving no
// complete target, no target file and no scratch file.
func importFailsWith(t *testing.T, o importer.Options) error {
	t.Helper()
	_, err := importFailure(t, o)
	return err
}

// importFailure is importFailsWith with the failed import's Result.
func importFailure(t *testing.T, o importer.Options) (*importer.Result, error) {
	t.Helper()
	if o.Target == "" {
		o.Target = filepath.Join(t.TempDir(), "disk.img")
	}
	if o.ScratchDir == "" && !o.NoScratch {
		o.ScratchDir = t.TempDir()
	}
	o.Logger = testimg.Logger(t)
	res, err := importer.Import(context.Background(), o)
	require.Error(t, err)
	t.Logf("error: %v", err)
	assert.False(t, res.Complete)
	if st, serr := os.Stat(o.Target); serr == nil && st.Mode().IsRegular() {
		t.Errorf("target file %s exists after a failed import", o.Target)
	}
	if o.ScratchDir != "" {
		assertEmptyDir(t, o.ScratchDir)
	}
	return res, err
}

func TestScratchMissingOrFull(t *testing.T) {
	testimg.Need(t, "qemu-img", "gzip")
	dir := t.TempDir()
	_, q := testimg.RawAndQCOW2(t, dir, 12<<20, 42)
	gz := testimg.Compress(t, q, "gz")

	t.Run("missing", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "no-such-dir")
		o := importer.Options{Source: gz, Target: filepath.Join(t.TempDir(), "disk.img"), TargetOptions: importer.TargetOptions{ScratchDir: missing, NoStreamDecode: true}, Logger: testimg.Logger(t)}
		res, err := importer.Import(context.Background(), o)
		require.Error(t, err)
		t.Logf("error: %v", err)
		assert.ErrorIs(t, err, importer.ErrScratchSpaceRequired)
		assert.False(t, res.Complete)
		_, serr := os.Stat(o.Target)
		assert.True(t, os.IsNotExist(serr))
	})
	t.Run("none given", func(t *testing.T) {
		// NoScratch: not the temp dir either (the default it replaces).
		tmp := t.TempDir()
		t.Setenv("TMPDIR", tmp)
		err := importFails(t, importer.Options{Source: gz, TargetOptions: importer.TargetOptions{NoScratch: true, NoStreamDecode: true}}, importer.ErrScratchSpaceRequired)
		assert.Contains(t, err.Error(), "no scratch space")
		assertEmptyDir(t, tmp)
		_, err = importer.Import(context.Background(), importer.Options{Source: gz, Target: filepath.Join(tmp, "disk.img"), TargetOptions: importer.TargetOptions{NoScratch: true, ScratchDir: tmp}})
		assert.ErrorIs(t, err, importer.ErrInvalidOptions, "NoScratch with a ScratchDir")
	})
	t.Run("full", func(t *testing.T) {
		fs := testimg.Tmpfs(t, 2<<20)
		err := importFails(t, importer.Options{Source: gz, TargetOptions: importer.TargetOptions{ScratchDir: fs, NoStreamDecode: true}}, importer.ErrScratchSpaceRequired)
		assert.Contains(t, err.Error(), fs)
	})
}

// mkfsLoop makes a loop device holding an ext4 filesystem.
func mkfsLoop(t *testing.T) string {
	testimg.Need(t, "mkfs.ext4", "mount")
	loop := testimg.LoopDevice(t, t.TempDir(), 16<<20)
	testimg.Run(t, "mkfs.ext4", "-q", "-F", loop)
	return loop
}

func TestMountedOrHeldDeviceRefused(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 4<<20, 43)
	t.Run("mounted", func(t *testing.T) {
		loop := mkfsLoop(t)
		mnt := t.TempDir()
		testimg.Run(t, "mount", loop, mnt)
		t.Cleanup(func() { exec.Command("umount", mnt).Run() })
		before := testimg.Digest(t, loop, 1<<20)
		err := importFailsWith(t, importer.Options{Source: raw, Target: loop})
		assert.ErrorIs(t, err, importer.ErrTargetBusy)
		assert.Contains(t, err.Error(), loop)
		assert.Equal(t, before, testimg.Digest(t, loop, 1<<20), "the mounted filesystem was written")
	})
	t.Run("held-exclusively-by-another-process", func(t *testing.T) {
		testimg.Need(t, "python3")
		loop := testimg.LoopDevice(t, t.TempDir(), 8<<20)
		holder := exec.Command("python3", "-c",
			"import os,sys,time; fd=os.open(sys.argv[1], os.O_RDONLY|os.O_EXCL); print('held', flush=True); time.sleep(60)", loop)
		out, err := holder.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, holder.Start())
		t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
		line, err := bufio.NewReader(out).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "held\n", line)
		assert.ErrorIs(t, importFailsWith(t, importer.Options{Source: raw, Target: loop}), importer.ErrTargetBusy)
	})
}

// qemu-img killed (SIGKILL, as the OOM killer would) in the middle of a
// convert: a clear error, no target.
func TestQemuImgKilledMidConvert(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	_, q := testimg.RawAndQCOW2(t, dir, 96<<20, 44)
	killed := make(chan int, 1)
	wrap := func(phase importer.Phase, step func(context.Context) error) func(context.Context) error {
		if phase != importer.PhaseConvert {
			return step
		}
		return func(ctx context.Context) error {
			stop := make(chan struct{})
			defer close(stop)
			go killChild(t, "qemu-img", stop, killed)
			return step(ctx)
		}
	}
	err := importFailsWith(t, importer.WithPhaseHook(importer.Options{Source: q}, wrap))
	select {
	case pid := <-killed:
		t.Logf("killed qemu-img pid %d", pid)
	default:
		t.Fatal("qemu-img finished before it could be killed")
	}
	assert.Contains(t, err.Error(), "qemu-img")
	assert.Contains(t, err.Error(), "killed from outside")
}

// killChild SIGKILLs the first child process of ours named comm.
func killChild(t *testing.T, comm string, stop <-chan struct{}, killed chan<- int) {
	me := strconv.Itoa(os.Getpid())
	for {
		select {
		case <-stop:
			return
		default:
		}
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
			if err != nil {
				continue
			}
			s := string(b)
			i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
			if i < 0 || j < 0 || s[i+1:j] != comm {
				continue
			}
			if f := strings.Fields(s[j+2:]); len(f) > 1 && f[1] == me {
				time.Sleep(20 * time.Millisecond) // let it get going
				syscall.Kill(pid, syscall.SIGKILL)
				killed <- pid
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// A library import that times out while it retries a refused connection
// (NoConnectRetry off, the default) keeps the cause in its chain and its
// text: a controller sees "connection refused", not only the deadline.
func TestImportTimedOutKeepsTheCause(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + l.Addr().String() + "/disk.qcow2"
	require.NoError(t, l.Close())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = importer.Import(ctx, importer.Options{Source: url, Target: filepath.Join(t.TempDir(), "disk.img"),
		Access: datasource.Access{
			RetryBackoff: 50 * time.Millisecond,
		}, Logger: testimg.Logger(t)})
	t.Log(err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, importer.ErrCancelled)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED, "the cause stays in the chain")
	assert.ErrorIs(t, err, importer.ErrSourceUnreachable)
	assert.Contains(t, err.Error(), "timed out while retrying after: GET "+url+": dial tcp")
	assert.Contains(t, err.Error(), "connection refused")
}

// A cancelled import reads "import cancelled", whatever was cut short
// (which stays in the chain).
func TestImportCancelledReadsCancelled(t *testing.T) {
	// 16 MiB at 64 KiB every 50 ms: the transfer would take 12 s.
	data := bytes.Repeat([]byte{7}, 16<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		for off := 0; off < len(data); off += 64 << 10 {
			if _, err := w.Write(data[off : off+64<<10]); err != nil {
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
	srvURL := srv.URL + "/disk.img"
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	_, err := importer.Import(ctx, importer.Options{Source: srvURL, Target: filepath.Join(t.TempDir(), "disk.img"), Logger: testimg.Logger(t)})
	require.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, importer.ErrCancelled)
	assert.Equal(t, "import cancelled", err.Error())
}

// With no Logger the library logs nothing: not to slog's default logger
// (the caller's program's own log) either.
func TestImportWithoutLoggerLogsNothing(t *testing.T) {
	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })
	dir := t.TempDir()
	src := filepath.Join(dir, "disk.raw")
	disk := bytes.Repeat([]byte{0xeb, 0x3c, 0x90}, 1<<20)
	disk[510], disk[511] = 0x55, 0xaa
	require.NoError(t, os.WriteFile(src, disk, 0o644))
	res, err := importer.Import(context.Background(), importer.Options{Source: src, Target: filepath.Join(dir, "disk.img")})
	require.NoError(t, err)
	assert.True(t, res.Complete)
	got, err := os.ReadFile(filepath.Join(dir, "disk.img"))
	require.NoError(t, err)
	assert.Equal(t, disk, got)
	_, err = importer.Import(context.Background(), importer.Options{Source: filepath.Join(dir, "nope"), Target: filepath.Join(dir, "x.img")})
	require.Error(t, err)
	assert.Empty(t, logs.String())
}

// importFails runs an import that must fail with want, never reporting the
// target complete, and leaving no target file and no scratch file behind,
// nor anything else in the target's directory.
func importFails(t *testing.T, o importer.Options, want error) error {
	t.Helper()
	if o.Target == "" {
		o.Target = filepath.Join(t.TempDir(), "disk.img")
	}
	err := importFailsWith(t, o)
	assert.ErrorIs(t, err, want)
	assertEmptyDir(t, filepath.Dir(o.Target))
	return err
}

func TestTruncatedQCOW2(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	_, q := testimg.RawAndQCOW2(t, dir, imageSize, 3)
	require.NoError(t, os.Truncate(q, testimg.FileSize(t, q)/2))
	importFails(t, importer.Options{Source: q}, importer.ErrInvalidImage)
	base := testimg.Serve(t, dir)
	importFails(t, importer.Options{Source: base + "disk.qcow2"}, importer.ErrInvalidImage)
}

func TestTruncatedAndCorruptCompression(t *testing.T) {
	testimg.Need(t, "qemu-img", "gzip", "xz", "zstd")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 4)
	for _, kind := range []string{"gz", "xz", "zst"} {
		t.Run("truncated-"+kind, func(t *testing.T) {
			p := testimg.Compress(t, raw, kind)
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			cut := filepath.Join(t.TempDir(), "cut."+kind)
			require.NoError(t, os.WriteFile(cut, b[:len(b)*2/3], 0o644))
			importFails(t, importer.Options{Source: cut}, importer.ErrInvalidImage)
		})
	}
	t.Run("corrupt-gzip", func(t *testing.T) {
		p := testimg.Compress(t, raw, "gz")
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		for i := len(b) / 2; i < len(b)/2+64; i++ {
			b[i] ^= 0x5a
		}
		bad := filepath.Join(t.TempDir(), "bad.gz")
		require.NoError(t, os.WriteFile(bad, b, 0o644))
		importFails(t, importer.Options{Source: bad}, importer.ErrInvalidImage)
	})
}

func TestHTTPFailures(t *testing.T) {
	data := bytes.Repeat([]byte("dsk\x00"), 64<<10) // binary: a text body is refused as not a disk
	mux := http.NewServeMux()
	mux.HandleFunc("/500", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", 500) })
	mux.HandleFunc("/short", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		w.WriteHeader(200)
		w.Write(data[:len(data)/3])
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	err := importFails(t, importer.Options{Source: srv.URL + "/missing"}, importer.ErrSourceRefused)
	assert.Contains(t, err.Error(), "404 Not Found")
	var se *importer.HTTPStatusError
	require.True(t, errors.As(err, &se))
	assert.Equal(t, 404, se.StatusCode)

	// 5xx and drops are retried (quickly here), then reported with the cause.
	err = importFails(t, importer.Options{Source: srv.URL + "/500", Access: datasource.Access{RetryBackoff: time.Millisecond}, Retries: new(3)}, importer.ErrSourceRefused)
	assert.Contains(t, err.Error(), "500")
	assert.Contains(t, err.Error(), "gave up after 3 retries")

	importFails(t, importer.Options{Source: srv.URL + "/short", Access: datasource.Access{RetryBackoff: time.Millisecond}, Retries: new(3)}, importer.ErrSourceUnreachable)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	importFails(t, importer.Options{Source: "http://" + addr + "/disk.img", Access: datasource.Access{RetryBackoff: time.Millisecond}}, importer.ErrSourceUnreachable)
}

func TestUnsafeImages(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "base.raw", 1<<20, 5)
	base := testimg.Serve(t, dir)

	testimg.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-b", raw, "-F", "raw", filepath.Join(dir, "backed.qcow2"))
	testimg.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-o", "data_file="+filepath.Join(dir, "data.raw"), filepath.Join(dir, "datafile.qcow2"), "1M")
	testimg.Convert(t, raw, filepath.Join(dir, "flat.vmdk"), "vmdk", "subformat=monolithicFlat")
	for _, name := range []string{"backed.qcow2", "datafile.qcow2", "flat.vmdk"} {
		t.Run(name, func(t *testing.T) {
			importFails(t, importer.Options{Source: filepath.Join(dir, name)}, importer.ErrUnsafeImage)
			importFails(t, importer.Options{Source: base + name}, importer.ErrUnsafeImage)
		})
	}
}

func TestChecksumMismatch(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw, q := testimg.RawAndQCOW2(t, dir, imageSize, 6)
	base := testimg.Serve(t, dir)
	wrong := "sha256:" + strings.Repeat("ab", 32)
	for _, src := range []string{raw, q, base + "disk.raw", base + "disk.qcow2"} {
		err := importFails(t, importer.Options{Source: src, Checksums: []string{wrong}}, importer.ErrChecksumMismatch)
		assert.Contains(t, err.Error(), "checksum mismatch")
	}
	// Two checksums, one right and one wrong: still a mismatch.
	importFails(t, importer.Options{Source: raw, Checksums: []string{testimg.FileDigest(t, raw), "md5:" + strings.Repeat("0", 32)}}, importer.ErrChecksumMismatch)
}

func TestImageLargerThanDevice(t *testing.T) {
	testimg.Need(t, "qemu-img", "zstd")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "big.raw", 12<<20, 7)
	q := testimg.Convert(t, raw, filepath.Join(dir, "big.qcow2"), "qcow2")
	zst := testimg.Compress(t, raw, "zst")
	base := testimg.Serve(t, dir)
	loop := testimg.LoopDevice(t, dir, 8<<20)
	before := testimg.Digest(t, loop, 1<<20)
	for _, src := range []string{q, raw, base + "big.qcow2", base + "big.raw", base + "big.raw.zst", zst} {
		t.Run(filepath.Base(src), func(t *testing.T) {
			o := importer.Options{Source: src, Target: loop, TargetOptions: importer.TargetOptions{ScratchDir: t.TempDir()}, Logger: testimg.Logger(t)}
			res, err := importer.Import(context.Background(), o)
			require.Error(t, err)
			assert.ErrorIs(t, err, importer.ErrTargetTooSmall)
			assert.False(t, res.Complete)
			if strings.HasSuffix(src, ".zst") {
				// Its size is known only once it passes the end: writing
				// began, and the device's old head was zeroed first.
				testimg.AssertZeros(t, loop, 0, 1<<20)
			} else {
				assert.Equal(t, before, testimg.Digest(t, loop, 1<<20), "refused before writing, yet the device's first MiB changed")
			}
			assertEmptyDir(t, o.ScratchDir)
		})
	}
}

func TestFileTargetTooSmallForRequestedSize(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw, q := testimg.RawAndQCOW2(t, dir, 4<<20, 8)
	for _, src := range []string{raw, q} {
		err := importFails(t, importer.Options{Source: src, TargetOptions: importer.TargetOptions{Size: 2 << 20}}, importer.ErrTargetTooSmall)
		var se *importer.SizeError
		require.True(t, errors.As(err, &se))
		assert.Contains(t, err.Error(), "2097152")
	}
}

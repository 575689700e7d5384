package qemu

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/sandbox"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// formats that the engine converts, with the create options that keep the
// virtual size exact (vpc would otherwise round to CHS geometry).
var testFormats = []struct {
	name string
	opts []string
}{
	{"qcow2", nil},
	{"vmdk", nil},
	{"vhdx", nil},
	{"vdi", nil},
	{"vpc", []string{"-o", "subformat=dynamic,force_size=on"}},
}

func TestInfoCheckAndConvertEachFormat(t *testing.T) {
	requireTools(t)
	dir := t.TempDir()
	raw, data := makeRaw(t, dir)
	r := &Runner{}
	ctx := context.Background()
	for _, f := range testFormats {
		t.Run(f.name, func(t *testing.T) {
			img := filepath.Join(dir, "disk."+f.name)
			args := append([]string{"convert", "-q", "-f", "raw", "-O", f.name}, f.opts...)
			qemuImg(t, append(args, raw, img)...)

			info, err := r.Info(ctx, img, f.name)
			require.NoError(t, err)
			assert.Equal(t, f.name, info.Format)
			assert.EqualValues(t, rawSize, info.VirtualSize)
			assert.Positive(t, info.ActualSize)
			assert.Empty(t, info.BackingFilename)
			assert.Empty(t, info.DataFile)
			assert.False(t, info.Corrupt)
			if f.name == "vmdk" {
				// monolithicSparse: the only extent is the image itself.
				assert.Equal(t, []string{img}, info.ExtentFilenames)
			} else {
				assert.Empty(t, info.ExtentFilenames)
			}
			if f.name == "qcow2" {
				assert.EqualValues(t, 65536, info.ClusterSize)
			}

			require.NoError(t, r.Check(ctx, img, f.name), "healthy image must pass check (or be skipped for vpc)")

			out := filepath.Join(dir, f.name+".back.raw")
			pre, err := r.Convert(ctx, img, out, ConvertOptions{SrcFormat: f.name, DstFormat: "raw"})
			require.NoError(t, err)
			assert.False(t, pre)
			requireSameContent(t, data, out)
		})
	}
}

func TestConvertToQcow2AndBackWithProgress(t *testing.T) {
	requireTools(t)
	dir := t.TempDir()
	raw, data := makeRaw(t, dir)
	r := &Runner{}
	ctx := context.Background()
	q := filepath.Join(dir, "x.qcow2")
	var steps []float64
	_, err := r.Convert(ctx, raw, q, ConvertOptions{SrcFormat: "raw", DstFormat: "qcow2",
		Progress: func(p float64) { steps = append(steps, p) }})
	require.NoError(t, err)
	require.NotEmpty(t, steps)
	for i := 1; i < len(steps); i++ {
		assert.Greater(t, steps[i], steps[i-1], "progress must increase: %v", steps)
	}
	assert.Equal(t, 100.0, steps[len(steps)-1], "progress must end at 100: %v", steps)
	assert.GreaterOrEqual(t, len(steps), 3, "expected intermediate progress values: %v", steps)

	info, err := r.Info(ctx, q, "qcow2")
	require.NoError(t, err)
	assert.Equal(t, "qcow2", info.Format)

	back := filepath.Join(dir, "back.raw")
	_, err = r.Convert(ctx, q, back, ConvertOptions{SrcFormat: "qcow2", DstFormat: "raw", CacheMode: "none"})
	require.NoError(t, err)
	requireSameContent(t, data, back)
}

func TestConvertPreallocateFile(t *testing.T) {
	requireTools(t)
	dir := t.TempDir()
	raw, data := makeRaw(t, dir)
	out := filepath.Join(dir, "pre.raw")
	pre, err := (&Runner{}).Convert(context.Background(), raw, out, ConvertOptions{SrcFormat: "raw", DstFormat: "raw", Preallocate: true})
	require.NoError(t, err)
	assert.True(t, pre)
	requireSameContent(t, data, out)
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(out, &st))
	assert.GreaterOrEqual(t, st.Blocks*512, int64(rawSize), "preallocated file must have the hole allocated")
}

// attachLoop makes a loop device of size bytes backed by a sparse file.
func attachLoop(t *testing.T, size int64) string {
	t.Helper()
	backing := filepath.Join(t.TempDir(), "loop.img")
	require.NoError(t, os.WriteFile(backing, nil, 0o600))
	require.NoError(t, os.Truncate(backing, size))
	return testimg.AttachLoop(t, backing)
}

func TestConvertToBlockDevice(t *testing.T) {
	requireTools(t)
	_, _, q, data := makeQCOW2(t, "x.qcow2")
	r := &Runner{}
	ctx := context.Background()

	for _, c := range []struct {
		name         string
		opts         ConvertOptions
		preallocated bool
	}{
		{"preallocate falls back to -S 0", ConvertOptions{Preallocate: true}, true},
		{"existing target, target-is-zero", ConvertOptions{TargetExists: true, TargetIsZero: true}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev := attachLoop(t, rawSize)
			o := c.opts
			o.SrcFormat, o.DstFormat, o.CacheMode = "qcow2", "raw", "none"
			pre, err := r.Convert(ctx, q, dev, o)
			require.NoError(t, err)
			assert.Equal(t, c.preallocated, pre, "preallocation applied")
			requireSameContent(t, data, dev)
		})
	}
}

func TestBackingFileAndDataFileReported(t *testing.T) {
	requireTools(t)
	dir := t.TempDir()
	r := &Runner{}
	ctx := context.Background()
	base := filepath.Join(dir, "base.qcow2")
	top := filepath.Join(dir, "top.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", base, "1M")
	qemuImg(t, "create", "-q", "-f", "qcow2", "-b", base, "-F", "qcow2", top)
	info, err := r.Info(ctx, top, "qcow2")
	require.NoError(t, err)
	assert.Equal(t, base, info.BackingFilename)

	ext := filepath.Join(dir, "x.raw")
	df := filepath.Join(dir, "df.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", "-o", "data_file="+ext+",data_file_raw=on", df, "1M")
	info, err = r.Info(ctx, df, "qcow2")
	require.NoError(t, err)
	assert.Equal(t, ext, info.DataFile)
	assert.Empty(t, info.BackingFilename)
}

func TestCreateAndResize(t *testing.T) {
	requireTools(t)
	dir := t.TempDir()
	r := &Runner{}
	ctx := context.Background()
	for _, pre := range []bool{false, true} {
		p := filepath.Join(dir, "c.raw")
		_ = os.Remove(p)
		require.NoError(t, r.Create(ctx, p, "raw", 3<<20, pre))
		st, err := os.Stat(p)
		require.NoError(t, err)
		assert.EqualValues(t, 3<<20, st.Size())

		require.NoError(t, r.Resize(ctx, p, "raw", 5<<20, pre))
		st, err = os.Stat(p)
		require.NoError(t, err)
		assert.EqualValues(t, 5<<20, st.Size())
		if pre {
			var s syscall.Stat_t
			require.NoError(t, syscall.Stat(p, &s))
			assert.GreaterOrEqual(t, s.Blocks*512, int64(5<<20))
		}
	}
	q := filepath.Join(dir, "c.qcow2")
	require.NoError(t, r.Create(ctx, q, "qcow2", 7<<20, false))
	require.NoError(t, r.Resize(ctx, q, "qcow2", 9<<20, false))
	info, err := r.Info(ctx, q, "qcow2")
	require.NoError(t, err)
	assert.EqualValues(t, 9<<20, info.VirtualSize)
}

func TestEmptyFormatIsAnError(t *testing.T) {
	r := &Runner{}
	ctx := context.Background()
	_, err := r.Info(ctx, "/nonexistent", "")
	require.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	require.ErrorIs(t, r.Check(ctx, "/nonexistent", ""), errdefs.ErrInvalidOptions)
	_, err = r.Convert(ctx, "a", "b", ConvertOptions{DstFormat: "raw"})
	require.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	_, err = r.Convert(ctx, "a", "b", ConvertOptions{SrcFormat: "qcow2", DstFormat: "raw", CacheMode: "unsafe"})
	require.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	require.ErrorIs(t, r.Resize(ctx, "a", "", 1, false), errdefs.ErrInvalidOptions)
	require.ErrorIs(t, r.Create(ctx, "a", "", 1, false), errdefs.ErrInvalidOptions)
}

func TestMissingQemuImgFailsClearly(t *testing.T) {
	r := &Runner{QemuImg: filepath.Join(t.TempDir(), "no-such-qemu-img")}
	_, err := r.Info(context.Background(), "/nonexistent", "raw")
	require.ErrorIs(t, err, errdefs.ErrToolMissing)
	assert.Contains(t, err.Error(), "is not installed")
	assert.Contains(t, err.Error(), "apt install qemu-utils")
	assert.ErrorIs(t, r.Installed(), errdefs.ErrToolMissing)
}

func TestErrorsCarrySubcommandAndStderr(t *testing.T) {
	requireTools(t)
	_, err := (&Runner{}).Info(context.Background(), "/nonexistent/x.qcow2", "qcow2")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "qemu-img info")
	assert.Contains(t, err.Error(), "No such file or directory")
}

func TestAddressSpaceLimitKills(t *testing.T) {
	requireTools(t)
	dir, _, q, _ := makeQCOW2(t, "x.qcow2")
	r := &Runner{Limits: Limits{AddressSpace: 16 << 20}}
	_, err := r.Info(context.Background(), q, "qcow2")
	require.Error(t, err)
	t.Log(err)
	assert.Contains(t, err.Error(), "qemu-img info")
	assert.Contains(t, err.Error(), "limit reached")

	// The same cap stops convert too.
	r = &Runner{Limits: Limits{AddressSpace: 16 << 20}}
	_, err = r.Convert(context.Background(), q, filepath.Join(dir, "o.raw"), ConvertOptions{SrcFormat: "qcow2", DstFormat: "raw"})
	require.Error(t, err)
	t.Log(err)
	assert.Contains(t, err.Error(), "qemu-img convert")
	assert.Contains(t, err.Error(), "limit reached")
}

// blockingSource is a FIFO: qemu-img blocks forever opening it, which gives
// a child that only a kill ends.
func blockingSource(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(p, 0o600))
	return p
}

// qemuImgRunningOn reports whether some process has path in its command line.
func qemuImgRunningOn(path string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), path) {
			return true
		}
	}
	return false
}

func TestCancelKillsChild(t *testing.T) {
	requireTools(t)
	src := blockingSource(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	errc := make(chan error, 1)
	go func() {
		_, err := (&Runner{}).Convert(ctx, src, filepath.Join(t.TempDir(), "o.raw"), ConvertOptions{SrcFormat: "raw", DstFormat: "raw"})
		errc <- err
	}()
	// Real time: qemu-img is a real child process, which no synctest
	// bubble holds. The bounds only keep a broken cancel from hanging the
	// package: the source is a FIFO nobody writes, so qemu-img never ends
	// on its own, and only the cancel can return Convert; no machine is
	// slow enough to reach them otherwise.
	require.Eventually(t, func() bool { return qemuImgRunningOn(src) }, time.Minute, 20*time.Millisecond, "qemu-img did not start")
	cancel()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, context.Canceled)
		assert.Contains(t, err.Error(), "qemu-img convert")
	case <-time.After(time.Minute):
		t.Fatal("Convert did not return after cancel")
	}
	assert.False(t, qemuImgRunningOn(src), "qemu-img still running after cancel")
}

// TestInfoTimeout: qemu-img info of a FIFO nobody writes never ends on its
// own, so Info's return with DeadlineExceeded is the proof that
// InfoTimeout ended it; no clock is read (a real child process runs on real
// time, outside any synctest bubble).
func TestInfoTimeout(t *testing.T) {
	requireTools(t)
	src := blockingSource(t)
	_, err := (&Runner{InfoTimeout: 300 * time.Millisecond}).Info(context.Background(), src, "raw")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.False(t, qemuImgRunningOn(src))
}

// corruptL1 overwrites the first L1 entry of a qcow2 with an offset that is
// not cluster-aligned, which qemu-img check must flag as corruption.
func corruptL1(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	var hdr [48]byte
	_, err = f.ReadAt(hdr[:], 0)
	require.NoError(t, err)
	require.Equal(t, "QFI\xfb", string(hdr[:4]))
	l1 := binary.BigEndian.Uint64(hdr[40:48]) // l1_table_offset
	var entry [8]byte
	binary.BigEndian.PutUint64(entry[:], 1<<63|0x12345) // "copied" flag + garbage offset
	_, err = f.WriteAt(entry[:], int64(l1))
	require.NoError(t, err)
}

func TestCheckReportsCorruption(t *testing.T) {
	requireTools(t)
	_, _, q, _ := makeQCOW2(t, "x.qcow2")
	r := &Runner{}
	require.NoError(t, r.Check(context.Background(), q, "qcow2"))
	corruptL1(t, q)
	err := r.Check(context.Background(), q, "qcow2")
	require.ErrorIs(t, err, errdefs.ErrInvalidImage)
	t.Log(err)
	assert.Contains(t, err.Error(), "qemu-img check")
	assert.Contains(t, err.Error(), "L1 entry")
}

func TestCheckAcceptsLeaks(t *testing.T) {
	requireTools(t)
	_, _, q, _ := makeQCOW2(t, "x.qcow2")
	// Zeroing the first L1 entry drops the reference to its L2 table and
	// data clusters: they stay allocated in the refcounts, i.e. leaked.
	f, err := os.OpenFile(q, os.O_RDWR, 0)
	require.NoError(t, err)
	var hdr [48]byte
	_, err = f.ReadAt(hdr[:], 0)
	require.NoError(t, err)
	_, err = f.WriteAt(make([]byte, 8), int64(binary.BigEndian.Uint64(hdr[40:48])))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	out, _ := exec.Command("qemu-img", "check", "-f", "qcow2", q).CombinedOutput()
	require.Contains(t, string(out), "leaked clusters", "fixture must leak: %s", out)
	assert.NoError(t, (&Runner{}).Check(context.Background(), q, "qcow2"))
}

func TestDescribeFailureNamesCPULimit(t *testing.T) {
	requireTools(t)
	// A real process killed by RLIMIT_CPU, set by the same launcher that
	// starts qemu-img: a 1 s CPU limit on a busy loop.
	c, err := sandbox.Start(context.Background(), &sandbox.Policy{Program: "/bin/sh", Args: []string{"-c", "while :; do :; done"}, CPUSeconds: 1}, sandbox.Stdio{})
	require.NoError(t, err)
	err = c.Wait()
	require.Error(t, err)
	got := describeFailure(runSpec{sub: "convert", limits: Limits{AddressSpace: 1 << 30, CPUSeconds: 1}}, "", err)
	assert.Contains(t, got.Error(), "qemu-img convert was killed")
	assert.Contains(t, got.Error(), "CPU limit reached")
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee))
}

package cdi

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testkit/testimg"
)

// sizeDetection runs RunSizeDetection as CDI's pod does, its paths under
// a directory of the test's; it returns the exit code, the termination
// message and what went to stderr and the log.
func sizeDetection(t *testing.T, args ...string) (code int, message, output string) {
	t.Helper()
	prefix := t.TempDir()
	paths := PathsFromEnv(func(k string) string {
		if k == "IMPORTER_PATH_PREFIX" {
			return prefix
		}
		return ""
	})
	var out bytes.Buffer
	code = RunSizeDetection(context.Background(), args, paths, slog.New(slog.NewTextHandler(&out, nil)), &out)
	b, err := os.ReadFile(paths.TerminationLog)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return code, string(b), out.String()
}

// qemuVirtualSize is what qemu-img info says of a good image: the size
// CDI's own size detection reports.
func qemuVirtualSize(t *testing.T, path string) int64 {
	t.Helper()
	out, err := exec.Command("qemu-img", "info", "--output=json", path).Output()
	require.NoError(t, err)
	i := bytes.Index(out, []byte(`"virtual-size": `))
	require.Positive(t, i, "%s", out)
	rest := out[i+len(`"virtual-size": `):]
	n, err := strconv.ParseInt(string(rest[:bytes.IndexAny(rest, ",\n")]), 10, 64)
	require.NoError(t, err)
	return n
}

func TestSizeDetectionWritesTheVirtualSizeOfGoodImages(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 3<<20, 1)
	sparse := filepath.Join(dir, "sparse.qcow2")
	testimg.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", sparse, "10G")
	for name, path := range map[string]string{
		"raw":                   raw,
		"qcow2":                 testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2"),
		"qcow2 of 10 GiB":       sparse,
		"monolithicSparse vmdk": testimg.Convert(t, raw, filepath.Join(dir, "disk.vmdk"), "vmdk"),
		"vhdx":                  testimg.Convert(t, raw, filepath.Join(dir, "disk.vhdx"), "vhdx"),
	} {
		t.Run(name, func(t *testing.T) {
			code, msg, out := sizeDetection(t, "-image-path", path)
			require.Equal(t, ExitOK, code, out)
			assert.Equal(t, strconv.FormatInt(qemuVirtualSize(t, path), 10), msg, "the termination message is the virtual size in decimal bytes, as qemu-img info gives it")
		})
	}
}

// withBackingFile names a backing file in a qcow2's header: the name at
// 0x1000, inside the header cluster, past qemu-img's header extensions.
func withBackingFile(b []byte, name string) []byte {
	copy(b[0x1000:], name)
	binary.BigEndian.PutUint64(b[8:], 0x1000)
	binary.BigEndian.PutUint32(b[16:], uint32(len(name)))
	return b
}

func TestSizeDetectionRefusesHostileAndCorruptImagesWithExit2(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 1<<20, 2)
	qcow2, err := os.ReadFile(testimg.Convert(t, raw, filepath.Join(dir, "good.qcow2"), "qcow2"))
	require.NoError(t, err)
	patched := func(name string, fn func(b []byte) []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, fn(bytes.Clone(qcow2)), 0o644))
		return p
	}
	vmdkExtents := filepath.Join(dir, "extents.vmdk")
	require.NoError(t, os.WriteFile(vmdkExtents, []byte("# Disk DescriptorFile\nversion=1\nCID=fffffffe\nparentCID=ffffffff\ncreateType=\"monolithicFlat\"\n\n"+
		"RW 2048 FLAT \"/etc/shadow\" 0\n\nddb.virtualHWVersion = \"4\"\n"), 0o644))
	// A consistent qcow2 v3 header of 1 PiB (2 MiB clusters, its L1 table
	// as long as the size needs), its tables all zero.
	pib := filepath.Join(dir, "pib.qcow2")
	{
		const clusterBits, size = 21, 1 << 50
		cs := uint64(1) << clusterBits
		h := make([]byte, 4*cs)
		be := binary.BigEndian
		copy(h, "QFI\xfb")
		be.PutUint32(h[4:], 3)
		be.PutUint32(h[20:], clusterBits)
		be.PutUint64(h[24:], size)
		be.PutUint32(h[36:], uint32(size/(cs*(cs/8))))
		be.PutUint64(h[40:], 3*cs)
		be.PutUint64(h[48:], cs)
		be.PutUint32(h[56:], 1)
		be.PutUint32(h[96:], 4)
		be.PutUint32(h[100:], 104)
		require.NoError(t, os.WriteFile(pib, h, 0o644))
	}
	for _, c := range []struct {
		name, path, want string
	}{
		{"qcow2 with a backing file", patched("backing.qcow2", func(b []byte) []byte { return withBackingFile(b, "/etc/passwd") }), "backing file"},
		{"qcow2 with an external data file", patched("datafile.qcow2", func(b []byte) []byte { b[79] |= 1 << 2; return b }), "external data file"},
		{"qcow2 claiming 1 PiB", pib, "exceeds the limit"},
		{"qcow2 whose L2 table is its header", patched("loop.qcow2", func(b []byte) []byte {
			binary.BigEndian.PutUint64(b[binary.BigEndian.Uint64(b[40:]):], 1<<63)
			return b
		}), "invalid image"},
		{"truncated qcow2", patched("trunc.qcow2", func(b []byte) []byte { return b[:1000] }), "truncated"},
		{"vmdk descriptor naming other files", vmdkExtents, "extent"},
		{"xz-compressed raw", testimg.Compress(t, raw, "xz"), "xz-compressed"},
		{"no such file", filepath.Join(dir, "missing.img"), "no such file"},
		{"a directory", dir, "not a regular file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, msg, out := sizeDetection(t, "-image-path", c.path)
			assert.Equal(t, SizeExitInvalidFile, code, out)
			assert.Contains(t, msg, c.want, "the termination message names the cause")
			assert.Contains(t, out, c.want, "the log names the cause")
		})
	}
}

func TestSizeDetectionArgumentsAsCDIsBinary(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.img", 1<<20, 3)
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no -image-path", nil, SizeExitBadArguments, "-image-path is required"},
		{"an unknown flag", []string{"-image-path", raw, "-size"}, ExitUsage, "flag provided but not defined: -size"},
		{"-h", []string{"-h"}, ExitOK, "Usage of cdi-image-size-detection"},
		{"a relative path", []string{"-image-path", "disk.img"}, SizeExitInvalidPath, "absolute path"},
		{"another scheme", []string{"-scheme", "http://", "-image-path", "example.org/disk.img"}, SizeExitInvalidPath, "only file://"},
		{"an unparsable URL", []string{"-image-path", "/data/%zz"}, SizeExitInvalidPath, "invalid URL escape"},
		{"two dashes and the scheme spelled out", []string{"--scheme=file://", "--image-path=" + raw}, ExitOK, "Virtual size detected"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, out := sizeDetection(t, c.args...)
			assert.Equal(t, c.code, code, out)
			assert.Contains(t, out, c.want)
		})
	}
}

func TestSizeDetectionUnwritableTerminationLogExits4(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.img", 1<<20, 4)
	// The termination log's directory is a file: nothing can be written there.
	blocker := filepath.Join(dir, "dev")
	require.NoError(t, os.WriteFile(blocker, nil, 0o644))
	var out bytes.Buffer
	code := RunSizeDetection(context.Background(), []string{"-image-path", raw},
		Paths{TerminationLog: filepath.Join(blocker, "termination-log")}, slog.New(slog.NewTextHandler(&out, nil)), &out)
	assert.Equal(t, SizeExitBadTermFile, code, out.String())
}

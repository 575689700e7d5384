package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

func inspectJSON(t *testing.T, args ...string) (int, importer.Inspection) {
	t.Helper()
	code, stdout, _ := runCLI(t, nil, env(nil), append([]string{"inspect", "--json"}, args...)...)
	var in importer.Inspection
	if stdout != "" {
		require.NoError(t, jsonUnmarshal([]byte(stdout), &in), stdout)
	}
	return code, in
}

// inspect tells format, compression, sizes, scratch, route and refusals,
// for local files and HTTP (ranged or not), and writes nothing.
func TestInspect(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	dir := t.TempDir()
	www := filepath.Join(dir, "www")
	require.NoError(t, os.Mkdir(www, 0o755))
	raw := testimg.Raw(t, www, "disk.raw", 4<<20, 41)
	qcow := testimg.Convert(t, raw, filepath.Join(www, "disk.qcow2"), "qcow2")
	xz := testimg.Compress(t, qcow, "xz")
	backed := filepath.Join(www, "backed.qcow2")
	testimg.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", qcow, backed)
	url := testimg.Serve(t, www)
	t.Setenv("TMPDIR", t.TempDir())
	before, _ := os.ReadDir(www)

	cases := []struct {
		src, format, route string
		compressions       []string
		scratch            bool
	}{
		{raw, "raw", "stream", nil, false},
		{qcow, "qcow2", "in-place", nil, false},
		{xz, "qcow2", "stream-decode", []string{"xz"}, false},
		// A plain qcow2 over ranges is decoded as a stream (the route choice).
		{url + "/disk.qcow2", "qcow2", "stream-decode", nil, false},
		{url + "/disk.qcow2.xz", "qcow2", "stream-decode", []string{"xz"}, false},
	}
	for _, c := range cases {
		code, in := inspectJSON(t, c.src)
		assert.Equal(t, cdi.ExitOK, code, c.src)
		assert.Equal(t, c.format, in.SourceFormat, c.src)
		assert.Equal(t, c.compressions, in.Compressions, c.src)
		assert.EqualValues(t, 4<<20, in.VirtualSize, c.src)
		assert.Equal(t, c.route, in.Route, c.src)
		assert.Equal(t, c.scratch, in.ScratchNeeded, c.src)
		assert.Equal(t, importer.PhaseComplete, in.Phases[len(in.Phases)-1], c.src)
		assert.Empty(t, in.Refused, c.src)
	}

	code, in := inspectJSON(t, backed)
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, in.Refused, "backing")
	assert.Empty(t, in.Route)

	code, _, stderr := runCLI(t, nil, env(nil), "inspect", filepath.Join(dir, "nope.img"))
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "does not exist")

	code, stdout, _ := runCLI(t, nil, env(nil), "inspect", xz)
	assert.Equal(t, cdi.ExitOK, code)
	assert.Contains(t, stdout, "format        qcow2 (xz)\n")
	assert.Contains(t, stdout, "scratch       not needed")
	assert.Contains(t, stdout, "phases        Info → TransferDataFile → Resize → Commit → Complete\n")

	after, _ := os.ReadDir(www)
	assert.Equal(t, len(before), len(after), "inspect wrote nothing next to the images")
	left, _ := os.ReadDir(os.Getenv("TMPDIR"))
	assert.Empty(t, left, "nothing left in TMPDIR")
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// inspect names what a local image occupies on disk (as du -B1 counts
// it), and a refused image's JSON still names the format found with the
// reason.
func TestInspectAllocatedSizeAndRefusedFormat(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz", "du")
	dir := t.TempDir()
	sparse := filepath.Join(dir, "sparse.raw")
	testimg.Run(t, "qemu-img", "create", "-q", "-f", "raw", sparse, "8M")
	testimg.Run(t, "dd", "if=/dev/urandom", "of="+sparse, "bs=64k", "count=3", "seek=20", "conv=notrunc", "status=none")
	out, err := exec.Command("du", "-B1", sparse).Output()
	require.NoError(t, err)
	du := strings.Fields(string(out))[0]
	code, in := inspectJSON(t, sparse)
	require.Equal(t, cdi.ExitOK, code)
	assert.Equal(t, du, strconv.FormatInt(in.AllocatedSize, 10))
	assert.EqualValues(t, 8<<20, in.SourceSize)
	assert.Less(t, in.AllocatedSize, in.SourceSize)
	_, stdout, _ := runCLI(t, nil, env(nil), "inspect", sparse)
	assert.Contains(t, stdout, "allocated     ")
	assert.Contains(t, stdout, "("+du+" bytes)")

	// A qcow2 header with 2^40-byte clusters is refused.
	bad := filepath.Join(dir, "bad.qcow2")
	testimg.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", bad, "4M")
	f, err := os.OpenFile(bad, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{0, 0, 0, 40}, 20) // cluster_bits
	require.NoError(t, err)
	require.NoError(t, f.Close())
	badXZ := testimg.Compress(t, bad, "xz")
	for _, c := range []struct {
		src          string
		compressions []string
	}{{bad, nil}, {badXZ, []string{"xz"}}} {
		code, stdout, _ := runCLI(t, nil, env(nil), "inspect", "--json", c.src)
		assert.Equal(t, cdi.ExitFailed, code, c.src)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout), &m), stdout)
		assert.Equal(t, "qcow2", m["sourceFormat"], stdout)
		assert.NotEmpty(t, m["reason"], stdout)
		assert.NotEmpty(t, m["refused"], stdout)
		var in importer.Inspection
		require.NoError(t, json.Unmarshal([]byte(stdout), &in))
		assert.Equal(t, c.compressions, in.Compressions, stdout)
	}
}

// inspect reads an .xz's uncompressed size from its index, locally and
// over HTTP ranges, as xz --robot --list tells it; for a raw.xz that is
// the virtual size.
func TestInspectXZUncompressedSizeFromIndex(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	www := t.TempDir()
	raw := testimg.Raw(t, www, "disk.raw", 3<<20+4096, 43)
	multi := filepath.Join(www, "multi.raw.xz") // several blocks
	out, err := exec.Command("xz", "-T2", "--block-size=1MiB", "-c", raw).Output()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(multi, out, 0o644))
	qcow := testimg.Convert(t, raw, filepath.Join(www, "disk.qcow2"), "qcow2")
	qcowXZ := testimg.Compress(t, qcow, "xz")
	listed := func(path string) (blocks, uncompressed string) { return xzListed(t, path) }
	blocks, _ := listed(multi)
	require.NotEqual(t, "1", blocks)
	url := testimg.Serve(t, www)
	for _, c := range []struct{ src, file, format string }{
		{multi, multi, "raw"}, {url + "/multi.raw.xz", multi, "raw"},
		{qcowXZ, qcowXZ, "qcow2"}, {url + "/disk.qcow2.xz", qcowXZ, "qcow2"},
	} {
		_, want := listed(c.file)
		code, in := inspectJSON(t, c.src)
		require.Equal(t, cdi.ExitOK, code, c.src)
		assert.Equal(t, want, strconv.FormatInt(in.UncompressedSize, 10), c.src)
		if c.format == "raw" {
			assert.EqualValues(t, 3<<20+4096, in.VirtualSize, c.src)
		}
	}
	_, stdout, _ := runCLI(t, nil, env(nil), "inspect", multi)
	assert.Contains(t, stdout, "uncompressed  3.0 MiB (3149824 bytes)\n")

	code, in := inspectJSON(t, raw)
	require.Equal(t, cdi.ExitOK, code)
	assert.EqualValues(t, -1, in.UncompressedSize)
}

// xzListed is what xz --robot --list totals for path: its blocks and its
// uncompressed bytes.
func xzListed(t *testing.T, path string) (blocks, uncompressed string) {
	t.Helper()
	out, err := exec.Command("xz", "--robot", "--list", path).Output()
	require.NoError(t, err)
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Split(l, "\t"); f[0] == "totals" {
			return f[2], f[4]
		}
	}
	t.Fatalf("no totals in %s", out)
	return "", ""
}

// inspect of several xz streams one after the other (cat a.xz b.xz, as
// pixz and parallel compressors make them) gives the whole file's
// uncompressed size from every stream's index, locally and over HTTP
// ranges, as xz --robot --list sums it; for a raw.xz that is the virtual
// size, which the import then writes.
func TestInspectConcatenatedXZStreams(t *testing.T) {
	testimg.Need(t, "xz")
	www := t.TempDir()
	first := testimg.Raw(t, t.TempDir(), "a.raw", 2<<20, 51)
	second := testimg.Raw(t, t.TempDir(), "b.raw", 1<<20+8192, 52)
	var whole []byte
	for _, part := range []string{first, second} {
		out, err := exec.Command("xz", "-T1", "-c", part).Output()
		require.NoError(t, err)
		whole = append(whole, out...)
	}
	cat := filepath.Join(www, "cat.raw.xz")
	require.NoError(t, os.WriteFile(cat, whole, 0o644))
	out, err := exec.Command("xz", "--robot", "--list", cat).Output()
	require.NoError(t, err)
	require.Contains(t, string(out), "totals\t2\t", "xz lists two streams")
	_, want := xzListed(t, cat)
	require.Equal(t, strconv.Itoa(3<<20+8192), want)
	url := testimg.Serve(t, www)
	for _, src := range []string{cat, url + "/cat.raw.xz"} {
		code, in := inspectJSON(t, src)
		require.Equal(t, cdi.ExitOK, code, src)
		assert.Equal(t, want, strconv.FormatInt(in.UncompressedSize, 10), src)
		assert.EqualValues(t, 3<<20+8192, in.VirtualSize, src)
	}
}

// inspect --json gives a refused image's reason, as an import's JSON does.
func TestInspectJSONHasTheRefusalsReason(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	base := testimg.Convert(t, testimg.Raw(t, dir, "base.raw", 1<<20, 5), filepath.Join(dir, "base.qcow2"), "qcow2")
	child := filepath.Join(dir, "child.qcow2")
	out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-b", base, "-F", "qcow2", child).CombinedOutput()
	require.NoError(t, err, string(out))
	code, stdout, _ := runCLI(t, nil, env(nil), "inspect", "--json", child)
	assert.Equal(t, cdi.ExitFailed, code)
	var in map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &in))
	assert.Equal(t, "UnsafeImage", in["reason"])
	assert.Contains(t, in["refused"], "backing file \""+base+"\"")
}

// inspect says what the import finds in a fixed VHD (raw data and a footer
// the import leaves out): format vhd, the disk's size without the footer,
// for a local file and a URL served with ranges.
func TestInspectAgreesWithTheImportOnAFixedVHD(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 4<<20, 44)
	vhd := testimg.Convert(t, raw, filepath.Join(dir, "fixed.vhd"), "vpc", "subformat=fixed", "force_size=on")
	url := testimg.Serve(t, dir) + "/fixed.vhd"
	for _, src := range []string{vhd, url} {
		code, in := inspectJSON(t, src)
		require.Equal(t, cdi.ExitOK, code, src)
		code, out, _ := runCLI(t, nil, env(nil), "--json", "-q", src, filepath.Join(t.TempDir(), "disk.img"))
		require.Equal(t, cdi.ExitOK, code, src)
		res := decode(t, []byte(out))
		assert.Equal(t, "vhd", res.SourceFormat, src)
		assert.EqualValues(t, 4<<20, res.VirtualSize, src)
		assert.Equal(t, res.SourceFormat, in.SourceFormat, "inspect of %s", src)
		assert.Equal(t, res.VirtualSize, in.VirtualSize, "inspect of %s", src)
		assert.EqualValues(t, 4<<20+512, in.SourceSize, src)
		assert.Equal(t, "stream", in.Route, src)
	}
}

package importer_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

const imageSize = 5<<20 + 64<<10 // not a multiple of the 4 MiB copy buffer

// imageCase is one way of packing the same raw content.
type imageCase struct {
	name    string
	format  string // what the engine should report
	convert bool   // whether qemu-img convert is on the path
	self    bool   // the disk content is the built file itself (not the raw file)
	build   func(t *testing.T, raw, dir string) string
}

func qemuCase(name, fmt, reported string, opts ...string) imageCase {
	return imageCase{name: name, format: reported, convert: true, build: func(t *testing.T, raw, dir string) string {
		return testimg.Convert(t, raw, filepath.Join(dir, name), fmt, opts...)
	}}
}

func imageCases() []imageCase {
	return []imageCase{
		{name: "raw", format: "raw", build: func(t *testing.T, raw, dir string) string { return raw }},
		{name: "iso", format: "iso", self: true, build: func(t *testing.T, raw, dir string) string {
			// An ISO 9660 volume descriptor at 32 KiB: streamed as raw.
			b, err := os.ReadFile(raw)
			require.NoError(t, err)
			copy(b[0x8000:], "\x01CD001\x01")
			p := filepath.Join(dir, "disk.iso")
			require.NoError(t, os.WriteFile(p, b, 0o644))
			return p
		}},
		{name: "vhd-fixed", format: "vhd", build: func(t *testing.T, raw, dir string) string {
			return testimg.Convert(t, raw, filepath.Join(dir, "fixed.vhd"), "vpc", "subformat=fixed", "force_size=on")
		}},
		qemuCase("disk.qcow2", "qcow2", "qcow2"),
		qemuCase("sparse.vmdk", "vmdk", "vmdk"),
		qemuCase("stream.vmdk", "vmdk", "vmdk", "subformat=streamOptimized"),
		qemuCase("dynamic.vhd", "vpc", "vhd", "subformat=dynamic", "force_size=on"),
		qemuCase("disk.vhdx", "vhdx", "vhdx"),
		qemuCase("disk.vdi", "vdi", "vdi"),
	}
}

// rawAndWebRoot writes a raw disk of size bytes from seed into a new
// directory and makes an empty directory www beside it, for the images an
// HTTP server of the test serves.
func rawAndWebRoot(t *testing.T, size int64, seed uint64) (raw, www string) {
	dir := t.TempDir()
	raw = testimg.Raw(t, dir, "disk.raw", size, seed)
	www = filepath.Join(dir, "www")
	require.NoError(t, os.Mkdir(www, 0o755))
	return raw, www
}

// forEachFileAndURL runs f on each of files (name: path) twice, as the
// subtests NAME/file, src the path, and NAME/http, src its URL under base
// (a server of the files' directory).
func forEachFileAndURL(t *testing.T, files map[string]string, base string, f func(t *testing.T, path, src string)) {
	for name, path := range files {
		t.Run(name+"/file", func(t *testing.T) { f(t, path, path) })
		t.Run(name+"/http", func(t *testing.T) { f(t, path, base+filepath.Base(path)) })
	}
}

// expectImage checks that target holds exactly the raw content (and, for a
// block device, that the content is there and was not cut).
func expectImage(t *testing.T, raw, target string, block bool) {
	t.Helper()
	st, err := os.Stat(raw)
	require.NoError(t, err)
	if !block {
		tst, err := os.Stat(target)
		require.NoError(t, err)
		require.Equal(t, st.Size(), tst.Size(), "target file size")
	}
	require.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, target, st.Size()), "target content differs from the raw image")
}

func TestImportMatrix(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 1)
	www := filepath.Join(dir, "www")
	require.NoError(t, os.Mkdir(www, 0o755))
	base := testimg.Serve(t, www)

	for _, c := range imageCases() {
		img := c.build(t, raw, dir)
		served := filepath.Join(www, filepath.Base(img))
		if _, err := os.Stat(served); err != nil {
			require.NoError(t, os.Link(img, served))
		}
		sources := map[string]func() importer.Options{
			"file": func() importer.Options { return importer.Options{Source: img} },
			"http": func() importer.Options { return importer.Options{Source: base + filepath.Base(img)} },
			"stdin": func() importer.Options {
				f, err := os.Open(img)
				require.NoError(t, err)
				t.Cleanup(func() { f.Close() })
				return importer.Options{Source: "-", SourceReader: f}
			},
		}
		for srcName, mk := range sources {
			testimg.ForEachTarget(t, c.name+"/"+srcName, 8<<20, func(t *testing.T, tg testimg.Target) {
				o := mk()
				o.Logger = testimg.Logger(t)
				o.ScratchDir = t.TempDir()
				o.Target = tg.Path
				res, err := importer.Import(context.Background(), o)
				require.NoError(t, err)
				require.True(t, res.Complete)
				assert.Equal(t, c.format, res.SourceFormat)
				assert.Equal(t, importer.PhaseComplete, res.Phases[len(res.Phases)-1])
				// qemu-img reads a local file in place, and an HTTP
				// object that serves ranges through our NBD export
				// (the ranged route) unless it is a streamOptimized vmdk,
				// which is decoded straight onto the target; stdin
				// goes through scratch, but for the formats the
				// stream decoder reads, which are decoded.
				streamable := map[string]bool{"disk.qcow2": true, "stream.vmdk": true, "dynamic.vhd": true, "disk.vdi": true, "disk.vhdx": true}
				decoded := srcName == "http" && c.name == "stream.vmdk" ||
					srcName == "stdin" && streamable[c.name] ||
					// A compact qcow2 over ranges, onto a file or a
					// device, and a vhdx, a dynamic vhd and a vdi, are
					// decoded as a stream (the engine's route choice).
					srcName == "http" && (c.name == "disk.qcow2" || c.name == "disk.vhdx" || c.name == "dynamic.vhd" || c.name == "disk.vdi")
				assert.Equal(t, c.convert && !decoded, contains(res.Phases, importer.PhaseConvert), "phases %v", res.Phases)
				wantScratch := c.convert && srcName == "stdin" && !decoded
				assert.Equal(t, wantScratch, res.ScratchUsed, "phases %v", res.Phases)
				want := raw
				if c.self {
					want = img
				}
				expectImage(t, want, o.Target, tg.Block)
				assertEmptyDir(t, o.ScratchDir)
			})
		}
	}
}

func TestImportCompressed(t *testing.T) {
	testimg.Need(t, "qemu-img", "gzip", "xz", "zstd")
	dir := t.TempDir()
	raw, qcow := testimg.RawAndQCOW2(t, dir, imageSize, 2)
	base := testimg.Serve(t, dir)
	nested := testimg.Compress(t, testimg.Compress(t, raw, "gz"), "zst") // disk.raw.gz.zst
	cases := map[string][]string{
		filepath.Base(nested): {"zst", "gz"},
	}
	for _, kind := range []string{"gz", "xz", "zst"} {
		cases[filepath.Base(testimg.Compress(t, raw, kind))] = []string{kind}
		cases[filepath.Base(testimg.Compress(t, qcow, kind))] = []string{kind}
	}
	for name, comps := range cases {
		testimg.ForEachTarget(t, name, 8<<20, func(t *testing.T, tg testimg.Target) {
			for i, src := range []string{base + name, filepath.Join(dir, name)} {
				target := tg.Path
				if i > 0 && !tg.Block {
					target = filepath.Join(t.TempDir(), "disk.img") // a new file for each source
				}
				res, err := importer.Import(context.Background(), importer.Options{
					Source: src, Target: target, TargetOptions: importer.TargetOptions{
						ScratchDir: t.TempDir(),
					}, Logger: testimg.Logger(t),
					Checksums: []string{testimg.FileDigest(t, filepath.Join(dir, name))},
				})
				require.NoError(t, err, src)
				assert.Equal(t, comps, res.Compressions)
				assert.Len(t, res.Checksums, 1)
				expectImage(t, raw, target, tg.Block)
			}
		})
	}
}

func contains(ps []importer.Phase, p importer.Phase) bool {
	for _, x := range ps {
		if x == p {
			return true
		}
	}
	return false
}

func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	assert.Empty(t, testimg.DirNames(t, dir), "left behind in %s", dir)
}

// An LZ4 frame stream (lz4 -c) is decoded in one pass like gz, xz and zst:
// a raw.lz4 straight onto the target and a qcow2.lz4 through the stream
// decoder, no scratch, over HTTP and from standard input, onto a file and a
// loop device, byte for byte.
func TestLZ4Decoded(t *testing.T) {
	testimg.Need(t, "qemu-img", "lz4")
	dir := t.TempDir()
	raw, qcow := testimg.RawAndQCOW2(t, dir, imageSize, 41)
	for _, p := range []string{raw, qcow} {
		testimg.Run(t, "lz4", "-q", p, p+".lz4")
	}
	base := testimg.Serve(t, dir)
	for _, c := range []struct{ file, format string }{{"disk.raw.lz4", "raw"}, {"disk.qcow2.lz4", "qcow2"}} {
		for _, via := range []string{"http", "stdin"} {
			testimg.ForEachTarget(t, c.file+"/"+via, imageSize+1<<20, func(t *testing.T, tg testimg.Target) {
				o := importer.Options{Source: base + c.file, Target: tg.Path, TargetOptions: importer.TargetOptions{ScratchDir: t.TempDir()}, Logger: testimg.Logger(t)}
				if via == "stdin" {
					f, err := os.Open(filepath.Join(dir, c.file))
					require.NoError(t, err)
					defer f.Close()
					o.Source, o.SourceReader = "-", f
				}
				res, err := importer.Import(context.Background(), o)
				require.NoError(t, err)
				assert.Equal(t, c.format, res.SourceFormat)
				assert.Equal(t, []string{"lz4"}, res.Compressions)
				assert.False(t, res.ScratchUsed)
				assert.Equal(t, testimg.Digest(t, raw, imageSize), testimg.Digest(t, o.Target, imageSize))
			})
		}
	}
}

// memSource is a caller's own source: a disk held in memory.
type memSource struct {
	disk  []byte
	opens atomic.Int32
	fail  error
}

func (m *memSource) Open(context.Context) (*datasource.Transfer, error) {
	m.opens.Add(1)
	if m.fail != nil {
		return nil, m.fail
	}
	return &datasource.Transfer{Body: io.NopCloser(bytes.NewReader(m.disk)), Size: int64(len(m.disk))}, nil
}

func (m *memSource) String() string { return "mem" }

// A caller's own Source reaches Import, whole or through a Registry, and
// the target holds its bytes; its errors come back in the chain.
func TestImportTakesTheCallersSource(t *testing.T) {
	disk := bytes.Repeat([]byte{0xeb, 0x3c, 0x90, 0x4d}, 256<<10)
	disk[510], disk[511] = 0x55, 0xaa
	dir := t.TempDir()
	src := &memSource{disk: disk}
	target := filepath.Join(dir, "a.img")
	res, err := importer.Import(context.Background(), importer.Options{CustomSource: src, Target: target, Logger: testimg.Logger(t)})
	require.NoError(t, err)
	assert.True(t, res.Complete)
	got, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, disk, got)
	assert.Equal(t, int32(1), src.opens.Load())

	reg := datasource.Builtin()
	reg.Register("mem://", func(string, datasource.Config) (datasource.Source, error) { return src, nil })
	target = filepath.Join(dir, "b.img")
	_, err = importer.Import(context.Background(), importer.Options{Source: "mem://disk", Registry: reg, Target: target, Logger: testimg.Logger(t)})
	require.NoError(t, err)
	got, err = os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, disk, got)

	gone := errors.New("the disk went away")
	_, err = importer.Import(context.Background(), importer.Options{CustomSource: &memSource{fail: gone}, Target: filepath.Join(dir, "c.img"), Logger: testimg.Logger(t)})
	require.ErrorIs(t, err, gone)
	assert.NoFileExists(t, filepath.Join(dir, "c.img"))

	_, err = importer.Import(context.Background(), importer.Options{Source: "mem://disk", Target: filepath.Join(dir, "d.img"), Logger: testimg.Logger(t)})
	require.ErrorIs(t, err, importer.ErrInvalidOptions, "the built-in registry knows no mem://")
}

package importer_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// The stream-decode route: a streamed qcow2 or streamOptimized vmdk is
// decoded straight onto a raw target, no scratch file, no qemu-img.

var streamDecodePhases = []importer.Phase{importer.PhaseInfo, importer.PhaseTransferDataFile, importer.PhaseResize, importer.PhaseCommit, importer.PhaseComplete}

// logTo returns a debug logger into buf that also goes to the test log.
func logTo(t *testing.T, buf *bytes.Buffer) *slog.Logger {
	t.Helper()
	return slog.New(slog.NewTextHandler(io.MultiWriter(buf, t.Output()), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// loggedImport is an import of source onto target with a scratch directory
// of its own, logging into logs (logTo) for requireStreamDecoded to read.
func loggedImport(t *testing.T, source, target string, logs *bytes.Buffer) importer.Options {
	return importer.Options{Source: source, Target: target, TargetOptions: importer.TargetOptions{
		ScratchDir: t.TempDir(),
	}, Logger: logTo(t, logs)}
}

// requireStreamDecoded checks that an import took the stream-decode route:
// complete, no scratch at all, its phases and its log line.
func requireStreamDecoded(t *testing.T, res *importer.Result, err error, logs *bytes.Buffer) {
	t.Helper()
	require.NoError(t, err)
	assert.True(t, res.Complete)
	assert.False(t, res.ScratchUsed)
	assert.Zero(t, res.ScratchBytes)
	assert.Equal(t, streamDecodePhases, res.Phases)
	assert.Contains(t, logs.String(), "decoded straight onto the target")
}

func TestStreamDecodeRoute(t *testing.T) {
	testimg.Need(t, "qemu-img", "gzip", "xz", "zstd")
	dir := t.TempDir()
	raw, qcow := testimg.RawAndQCOW2(t, dir, imageSize, 41)
	packed := filepath.Join(dir, "packed.qcow2")
	testimg.Run(t, "qemu-img", "convert", "-q", "-c", "-f", "raw", "-O", "qcow2", raw, packed)
	vmdk := testimg.Convert(t, raw, filepath.Join(dir, "stream.vmdk"), "vmdk", "subformat=streamOptimized")
	images := map[string]string{ // name → qemu-img's raw of it
		filepath.Base(testimg.Compress(t, qcow, "xz")):   qemuRaw(t, qcow, "qcow2"),
		filepath.Base(testimg.Compress(t, packed, "gz")): qemuRaw(t, packed, "qcow2"),
		filepath.Base(testimg.Compress(t, vmdk, "zst")):  qemuRaw(t, vmdk, "vmdk"),
	}
	base := testimg.Serve(t, dir)
	for name, want := range images {
		for _, srcName := range []string{"http", "file"} {
			testimg.ForEachTarget(t, name+"/"+srcName, 8<<20, func(t *testing.T, tg testimg.Target) {
				var logs bytes.Buffer
				o := loggedImport(t, base+name, tg.Path, &logs)
				if srcName == "file" {
					o.Source = filepath.Join(dir, name)
				}
				res, err := importer.Import(context.Background(), o)
				requireStreamDecoded(t, res, err, &logs)
				st, err := os.Stat(want)
				require.NoError(t, err)
				assert.Equal(t, st.Size(), res.VirtualSize)
				assert.Equal(t, st.Size(), res.BytesWritten)
				assert.Positive(t, res.DataBytes)
				expectImage(t, want, o.Target, tg.Block)
				assertEmptyDir(t, o.ScratchDir)
			})
		}
	}
}

// lateTablesQCOW2 is a qcow2 some of whose data clusters come before the L2
// table that maps them (a write after a snapshot allocates a new table at
// the end of the file; the snapshot is then deleted), compressed with gzip.
func lateTablesQCOW2(t *testing.T, dir string) (gz, want string) {
	t.Helper()
	testimg.Need(t, "qemu-img", "qemu-io", "gzip")
	raw := testimg.Raw(t, dir, "late.raw", imageSize, 43)
	img := testimg.Convert(t, raw, filepath.Join(dir, "late.qcow2"), "qcow2")
	testimg.Run(t, "qemu-img", "snapshot", "-c", "s1", img)
	testimg.Run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0x42 1M 64k", "-c", "write -P 0x43 3M 128k", img)
	// Without its snapshot (an image with one takes the scratch route
	// from the start), the layout stays.
	testimg.Run(t, "qemu-img", "snapshot", "-d", "s1", img)
	return testimg.Compress(t, img, "gz"), qemuRaw(t, img, "qcow2")
}

// servedLateTables serves lateTablesQCOW2's image over HTTP at url.
func servedLateTables(t *testing.T) (url, gz, want string) {
	t.Helper()
	dir := t.TempDir()
	gz, want = lateTablesQCOW2(t, dir)
	url = testimg.Serve(t, dir) + filepath.Base(gz)
	return url, gz, want
}

// TestStreamDecodeFallsBackToScratch: a layout past the decoder's buffer
// restarts the import through scratch, which imports it correctly; the
// first attempt left nothing on the target.
func TestStreamDecodeFallsBackToScratch(t *testing.T) {
	url, _, want := servedLateTables(t)
	testimg.ForEachTarget(t, "", 8<<20, func(t *testing.T, tg testimg.Target) {
		var logs bytes.Buffer
		o := loggedImport(t, url, tg.Path, &logs)
		var phases []importer.Phase
		o.Events = func(e importer.Event) {
			if e.Kind == importer.EventPhaseStarted {
				phases = append(phases, e.Phase)
			}
		}
		res, err := importer.Import(context.Background(), importer.WithStreamDecodeBuffer(o, 1))
		require.NoError(t, err)
		assert.True(t, res.ScratchUsed)
		assert.Contains(t, res.Phases, importer.PhaseTransferScratch)
		assert.Contains(t, logs.String(), "cannot be decoded in one pass; starting the import over")
		assert.Equal(t, []importer.Phase{importer.PhaseInfo, importer.PhaseTransferDataFile, importer.PhaseError}, phases[:3],
			"the first attempt tried the decoder")
		expectImage(t, want, o.Target, tg.Block)
		assertEmptyDir(t, o.ScratchDir)
		if !tg.Block {
			assertOnly(t, filepath.Dir(o.Target), "disk.img")
		}
	})
}

func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	assert.ElementsMatch(t, names, testimg.DirNames(t, dir))
}

// TestStreamDecodeOneTimeStreams: stdin and uploads take the decoder too
// (what arrives before its tables spills to scratch, nothing is read
// again); an image in table order writes no scratch at all.
func TestStreamDecodeOneTimeStreams(t *testing.T) {
	testimg.Need(t, "qemu-img", "gzip")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 44)
	gz := testimg.Compress(t, testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2"), "gz")
	f, err := os.Open(gz)
	require.NoError(t, err)
	defer f.Close()
	var logs bytes.Buffer
	o := importer.Options{Source: "-", SourceReader: f, TargetOptions: importer.TargetOptions{
		ScratchDir: t.TempDir(),
	}, Logger: logTo(t, &logs),
		Target: filepath.Join(t.TempDir(), "disk.img")}
	res, err := importer.Import(context.Background(), o)
	requireStreamDecoded(t, res, err, &logs)
	expectImage(t, raw, o.Target, false)
	assertEmptyDir(t, o.ScratchDir)
}

// TestStreamDecodeSwitchOff: NoStreamDecode keeps the scratch route.
func TestStreamDecodeSwitchOff(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 45)
	xz := testimg.Compress(t, testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2"), "xz")
	o := importer.Options{Source: testimg.Serve(t, dir) + filepath.Base(xz), TargetOptions: importer.TargetOptions{
		ScratchDir:     t.TempDir(),
		NoStreamDecode: true,
	}, Logger: testimg.Logger(t),
		Target: filepath.Join(t.TempDir(), "disk.img")}
	res, err := importer.Import(context.Background(), o)
	require.NoError(t, err)
	assert.True(t, res.ScratchUsed)
	assert.Contains(t, res.Phases, importer.PhaseTransferScratch)
	expectImage(t, raw, o.Target, false)
}

// TestStreamDecodeTruncated: a qcow2.xz cut short fails as an invalid
// image, with nothing complete: no target file, a device without its head.
func TestStreamDecodeTruncated(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 46)
	q := testimg.Convert(t, raw, filepath.Join(dir, "cut.qcow2"), "qcow2")
	require.NoError(t, os.Truncate(q, testimg.FileSize(t, q)/2))
	cut := testimg.Compress(t, q, "xz") // a whole xz stream of a cut image
	whole := testimg.Convert(t, raw, filepath.Join(dir, "whole.qcow2"), "qcow2")
	wxz := testimg.Compress(t, whole, "xz")
	data, err := os.ReadFile(wxz)
	require.NoError(t, err)
	cutXZ := filepath.Join(dir, "cutxz.qcow2.xz") // the xz stream itself cut
	require.NoError(t, os.WriteFile(cutXZ, data[:len(data)*2/3], 0o644))
	base := testimg.Serve(t, dir)
	for _, name := range []string{filepath.Base(cut), filepath.Base(cutXZ)} {
		testimg.ForEachTarget(t, name, 8<<20, func(t *testing.T, tg testimg.Target) {
			var logs bytes.Buffer
			o := loggedImport(t, base+name, tg.Path, &logs)
			res, err := importer.Import(context.Background(), o)
			t.Log(err)
			require.ErrorIs(t, err, errdefs.ErrInvalidImage)
			assert.False(t, res.Complete)
			assert.NotContains(t, res.Phases, importer.PhaseCommit)
			assert.Contains(t, logs.String(), "decoded straight onto the target")
			assertEmptyDir(t, o.ScratchDir)
			if !tg.Block {
				assertEmptyDir(t, filepath.Dir(o.Target))
			} else {
				assertNoMixOfImages(t, tg.Path)
			}
		})
	}
}

// assertNoMixOfImages checks a device, filled with 0xA5 before a failed
// import, for the rule that it never holds a mix of its old image and the
// new one: once any byte past the first MiB was written, the first MiB is
// all zeros (the old head wiped, the new one never written); with nothing
// written there (the import failed before its writer flushed), the first
// MiB is zeros or still 0xA5, never the new image's.
func assertNoMixOfImages(t *testing.T, dev string) {
	t.Helper()
	b, err := os.ReadFile(dev)
	require.NoError(t, err)
	head, rest := b[:1<<20], b[1<<20:]
	zeros, old := make([]byte, len(head)), bytes.Repeat([]byte{0xA5}, len(head))
	if !bytes.Equal(rest, bytes.Repeat([]byte{0xA5}, len(rest))) {
		require.True(t, bytes.Equal(head, zeros), "%s: data past the first MiB was written, so its first MiB must be zeros", dev)
		return
	}
	require.True(t, bytes.Equal(head, zeros) || bytes.Equal(head, old), "%s: nothing past the first MiB was written, so its first MiB must be zeros or as it was", dev)
}

// TestStreamDecodeChecksum: --checksum is computed in the decoder's pass
// and checked before the head is committed. The plain qcow2 (read ahead on
// a goroutine of its own, then drained) carries bytes past its last
// cluster, which the digest must cover too.
func TestStreamDecodeChecksum(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	dir := t.TempDir()
	raw, qcow := testimg.RawAndQCOW2(t, dir, imageSize, 47)
	xz := testimg.Compress(t, qcow, "xz")
	f, err := os.OpenFile(qcow, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.Write(bytes.Repeat([]byte{0x5A}, 2<<20+123))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	base := testimg.Serve(t, dir)
	for _, img := range []string{xz, qcow} {
		t.Run(filepath.Base(img), func(t *testing.T) {
			streamDecodeChecksum(t, base+filepath.Base(img), img, raw)
		})
	}
}

func streamDecodeChecksum(t *testing.T, url, img, raw string) {
	testimg.ForEachTarget(t, "", 8<<20, func(t *testing.T, tg testimg.Target) {
		target := tg.Path
		// A mismatch first: writing began, so the device's old head is wiped.
		o := importer.Options{Source: url, Target: target, TargetOptions: importer.TargetOptions{
			ScratchDir: t.TempDir(),
		}, Logger: testimg.Logger(t),
			Checksums: []string{"sha256:" + string(bytes.Repeat([]byte("0"), 64))}}
		res, err := importer.Import(context.Background(), o)
		require.ErrorIs(t, err, errdefs.ErrChecksumMismatch)
		assert.False(t, res.Complete)
		assert.Equal(t, []importer.Phase{importer.PhaseInfo, importer.PhaseTransferDataFile, importer.PhaseError}, res.Phases)
		if !tg.Block {
			assertEmptyDir(t, filepath.Dir(target))
		} else {
			testimg.AssertZeros(t, tg.Path, 0, 1<<20) // the old head wiped, the new one never written
		}
		assertEmptyDir(t, o.ScratchDir)

		o.Checksums = []string{testimg.FileDigest(t, img)}
		res, err = importer.Import(context.Background(), o)
		require.NoError(t, err)
		assert.False(t, res.ScratchUsed)
		assert.Equal(t, streamDecodePhases, res.Phases)
		assert.Len(t, res.Checksums, 1)
		expectImage(t, raw, target, tg.Block)
		assertEmptyDir(t, o.ScratchDir)
	})
}

// serveWhole serves the files of dir on 127.0.0.1 without byte ranges: no
// Accept-Ranges, and a Range header is answered with the whole file, so
// the engine cannot read the image in place. It counts the requests.
func serveWhole(t *testing.T, dir string, requests *atomic.Int64) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		f, err := os.Open(filepath.Join(dir, filepath.Base(r.URL.Path)))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
		if r.Method == http.MethodHead {
			return
		}
		_, _ = io.Copy(w, f)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/"
}

// TestStreamDecodeVHDAndVDI: a dynamic VHD, a VDI and a VHDX streamed over HTTP
// without ranges are decoded straight onto a file or a device: no
// scratch, the stream-decode phases, qemu-img's bytes.
func TestStreamDecodeVHDAndVDI(t *testing.T) {
	testimg.Need(t, "qemu-img", "gzip", "zstd")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 51)
	vhd := testimg.Convert(t, raw, filepath.Join(dir, "disk.vhd"), "vpc")
	vhdForced := testimg.Convert(t, raw, filepath.Join(dir, "forced.vhd"), "vpc", "force_size=on")
	vdi := testimg.Convert(t, raw, filepath.Join(dir, "disk.vdi"), "vdi")
	static := testimg.Convert(t, raw, filepath.Join(dir, "static.vdi"), "vdi", "static=on")
	vhdx := testimg.Convert(t, raw, filepath.Join(dir, "disk.vhdx"), "vhdx")
	images := map[string]string{ // name → qemu-img's raw of it
		filepath.Base(testimg.Compress(t, vhd, "gz")):        qemuRaw(t, vhd, "vpc"),
		filepath.Base(testimg.Compress(t, vhdForced, "zst")): qemuRaw(t, vhdForced, "vpc"),
		filepath.Base(vhd): qemuRaw(t, vhd, "vpc"),
		filepath.Base(testimg.Compress(t, vdi, "zst")):   qemuRaw(t, vdi, "vdi"),
		filepath.Base(testimg.Compress(t, static, "gz")): qemuRaw(t, static, "vdi"),
		filepath.Base(testimg.Compress(t, vhdx, "gz")):   qemuRaw(t, vhdx, "vhdx"),
	}
	var requests atomic.Int64
	base := serveWhole(t, dir, &requests)
	for name, want := range images {
		testimg.ForEachTarget(t, name, 8<<20, func(t *testing.T, tg testimg.Target) {
			var logs bytes.Buffer
			o := loggedImport(t, base+name, tg.Path, &logs)
			before := requests.Load()
			res, err := importer.Import(context.Background(), o)
			requireStreamDecoded(t, res, err, &logs)
			assert.Positive(t, requests.Load()-before, "the image came from the server")
			st, err := os.Stat(want)
			require.NoError(t, err)
			assert.Equal(t, st.Size(), res.VirtualSize)
			assert.Positive(t, res.DataBytes)
			expectImage(t, want, o.Target, tg.Block)
			assertEmptyDir(t, o.ScratchDir)
			if !tg.Block {
				assertOnly(t, filepath.Dir(o.Target), "disk.img")
			}
		})
	}
}

// TestStreamDecodeVHDXTooBig: a VHDX's virtual size is only in its
// metadata region, past Info's header checks; the decoder learns it before
// any block reaches the target and refuses a disk larger than the target,
// with nothing written.
func TestStreamDecodeVHDXTooBig(t *testing.T) {
	testimg.Need(t, "qemu-img", "gzip")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 16<<20, 52)
	vhdx := testimg.Compress(t, testimg.Convert(t, raw, filepath.Join(dir, "big.vhdx"), "vhdx"), "gz")
	var requests atomic.Int64
	base := serveWhole(t, dir, &requests)
	for _, tgtName := range []string{"file", "block"} {
		t.Run(tgtName, func(t *testing.T) {
			o := importer.Options{Source: base + filepath.Base(vhdx), TargetOptions: importer.TargetOptions{
				ScratchDir: t.TempDir(),
				Size:       8 << 20,
			},
				Target: filepath.Join(t.TempDir(), "disk.img")}
			if tgtName == "block" {
				if os.Geteuid() != 0 {
					t.Skip("loop devices need root")
				}
				o.Target, o.Size = testimg.LoopDevice(t, dir, 8<<20), 0
				require.NoError(t, os.WriteFile(o.Target, bytes.Repeat([]byte{0xA5}, 8<<20), 0))
			}
			res, err := importer.Import(context.Background(), o)
			require.ErrorIs(t, err, importer.ErrTargetTooSmall)
			assert.Contains(t, err.Error(), "16.0 MiB")
			assert.False(t, res.Complete)
			assertEmptyDir(t, o.ScratchDir)
			if tgtName == "file" {
				assertEmptyDir(t, filepath.Dir(o.Target))
				return
			}
			got, err := os.ReadFile(o.Target)
			require.NoError(t, err)
			assert.Equal(t, bytes.Repeat([]byte{0xA5}, 8<<20), got, "the device keeps its old bytes")
		})
	}
}

// TestStreamDecodeOverParallelRanges: an uncompressed qcow2 and vhd larger
// than a chunk, served with ranges, are read over several connections (a
// body that reads ahead itself, which the decoder then reads directly) and
// decoded as a stream onto each target, with and without a checksum
// verified on the way (then through a read-ahead of its own): the target
// holds qemu-img's bytes.
func TestStreamDecodeOverParallelRanges(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 12<<20, 47)
	images := map[string]string{}
	for _, f := range []struct{ name, qfmt, opts string }{{"disk.qcow2", "qcow2", ""}, {"disk.vhd", "vpc", "subformat=dynamic,force_size=on"}} {
		p := filepath.Join(dir, f.name)
		args := []string{"convert", "-q", "-f", "raw", "-O", f.qfmt}
		if f.opts != "" {
			args = append(args, "-o", f.opts)
		}
		testimg.Run(t, "qemu-img", append(args, raw, p)...)
		require.Greater(t, testimg.FileSize(t, p), int64(2*datasource.DefaultChunkSize), "more than one chunk")
		images[f.name] = qemuRaw(t, p, f.qfmt)
	}
	base, ranges := testimg.ServeCountingRanges(t, dir)
	for name, want := range images {
		for _, sum := range []bool{false, true} {
			testimg.ForEachTarget(t, fmt.Sprintf("%s/checksum=%v", name, sum), 16<<20, func(t *testing.T, tg testimg.Target) {
				var logs bytes.Buffer
				o := loggedImport(t, base+name, tg.Path, &logs)
				if sum {
					o.Checksums = []string{testimg.FileDigest(t, filepath.Join(dir, name))}
				}
				before := ranges.Load()
				res, err := importer.Import(context.Background(), o)
				requireStreamDecoded(t, res, err, &logs)
				assert.Greater(t, ranges.Load(), before, "read over ranges")
				expectImage(t, want, o.Target, tg.Block)
			})
		}
	}
}

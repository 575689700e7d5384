package format

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// xzModes are the xz decoders this machine has, each chosen alone:
// diskimport-inflate's ring ("ring"), the xz tool's pipe ("external") and
// pure Go ("go").
func xzModes(t *testing.T) map[string]Options {
	m := map[string]Options{"go": {ExternalXZ: "-", InflateChild: "-"}}
	if p, err := execLookPath("xz"); err == nil {
		m["external"] = Options{ExternalXZ: p, InflateChild: "-"}
	}
	if p := testimg.InflateChild(t); p != "" {
		m["ring"] = Options{ExternalXZ: "-", InflateChild: p}
	}
	return m
}

// openAll opens path with o and reads the whole image.
func openAll(t *testing.T, path string, o Options) (*Image, []byte, error) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	s, err := Open(context.Background(), f, o)
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(func() { s.Close() })
	b, err := io.ReadAll(s)
	return s, b, err
}

var compressors = map[Compression][]string{
	Gzip: {"gzip", "-6"},
	XZ:   {"xz", "-6", "-T2", "--block-size=1MiB"},
	Zstd: {"zstd", "-q", "-3"},
	LZ4:  {"lz4", "-q", "-c"},
}

// wrap compresses in with the given layers, innermost first.
func wrap(t *testing.T, in string, layers ...Compression) string {
	t.Helper()
	cur := in
	for _, c := range layers {
		next := cur + "." + string(c)
		if _, err := os.Stat(next); err != nil {
			tool := compressors[c]
			compressFile(t, cur, next, tool[0], tool[1:]...)
		}
		cur = next
	}
	return cur
}

func TestOpenRoundTrip(t *testing.T) {
	needTool(t, "qemu-img")
	dir := t.TempDir()
	raw := filepath.Join(dir, "disk.raw")
	content := variedContent(4<<20, 5)
	writeRaw(t, raw, content)
	qcow := convert(t, raw, dir, "disk.qcow2", "qcow2")
	qb, err := os.ReadFile(qcow)
	require.NoError(t, err)
	want := map[string]string{raw: sha(content), qcow: sha(qb)}
	cases := []struct {
		base   string
		layers []Compression
		f      Format
	}{
		{raw, nil, Raw},
		{raw, []Compression{Gzip}, Raw},
		{raw, []Compression{XZ}, Raw},
		{raw, []Compression{Zstd}, Raw},
		{raw, []Compression{LZ4}, Raw},
		{qcow, []Compression{LZ4}, QCOW2},
		{qcow, []Compression{Gzip}, QCOW2},
		{qcow, []Compression{XZ}, QCOW2},
		{qcow, []Compression{Zstd}, QCOW2},
		{raw, []Compression{Gzip, Zstd}, Raw},
		{qcow, []Compression{XZ, Gzip}, QCOW2},
		{raw, []Compression{Zstd, XZ, Gzip}, Raw},
	}
	modes := xzModes(t)
	for _, tc := range cases {
		p := wrap(t, tc.base, tc.layers...)
		for mode, o := range modes {
			t.Run(filepath.Base(p)+"/"+mode, func(t *testing.T) {
				s, b, err := openAll(t, p, o)
				require.NoError(t, err)
				assert.Equal(t, tc.f, s.Format)
				assert.Equal(t, len(tc.layers), len(s.Compressions))
				for i, c := range s.Compressions {
					assert.Equal(t, tc.layers[len(tc.layers)-1-i], c, "outermost first")
				}
				require.Equal(t, want[tc.base], sha(b), "decoded bytes differ")
				if tc.f == QCOW2 {
					assert.Equal(t, int64(len(content)), s.Header.VirtualSize)
				}
				require.NoError(t, s.Close())
				require.NoError(t, s.Close(), "second Close")
			})
		}
	}
}

func TestOpenMultiStream(t *testing.T) {
	dir := t.TempDir()
	a, b := variedContent(1<<20, 6), variedContent(1<<20, 7)
	pa, pb := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	writeRaw(t, pa, a)
	writeRaw(t, pb, b)
	modes := xzModes(t)
	for _, c := range []Compression{Gzip, XZ, Zstd, LZ4} {
		ca, cb := wrap(t, pa, c), wrap(t, pb, c)
		x, err := os.ReadFile(ca)
		require.NoError(t, err)
		y, err := os.ReadFile(cb)
		require.NoError(t, err)
		cat := filepath.Join(dir, "cat."+string(c))
		require.NoError(t, os.WriteFile(cat, append(x, y...), 0o644))
		for mode, o := range modes {
			_, got, err := openAll(t, cat, o)
			require.NoError(t, err, "%s %s", c, mode)
			require.Equal(t, sha(append(append([]byte(nil), a...), b...)), sha(got), "%s %s", c, mode)
		}
	}
}

func TestOpenTinyStreams(t *testing.T) {
	// Zero bytes are no disk at all (issue 9): refused, see
	// TestEmptySourceRefused; one byte of binary already is a raw stream
	// (a text one is refused, see TestTextRefused).
	_, emptyErr := Open(context.Background(), bytes.NewReader(nil), Options{})
	require.ErrorIs(t, emptyErr, errdefs.ErrInvalidImage)
	for _, n := range []int{1, 10, 300, 70000} {
		data := bytes.Repeat([]byte{0xab, 'b', 'c', 0}, n/4+1)[:n]
		s, err := Open(context.Background(), bytes.NewReader(data), Options{})
		require.NoError(t, err)
		assert.Equal(t, Raw, s.Format)
		assert.Equal(t, int64(-1), s.Header.VirtualSize)
		got, err := io.ReadAll(s)
		require.NoError(t, err)
		require.Equal(t, data, got, "len %d", n)
		require.NoError(t, s.Close())
	}
	// Tiny compressed streams too.
	dir := t.TempDir()
	p := filepath.Join(dir, "tiny")
	require.NoError(t, os.WriteFile(p, []byte("01234\x0056789"), 0o644))
	modes := xzModes(t)
	for _, c := range []Compression{Gzip, XZ, Zstd} {
		for mode, o := range modes {
			s, got, err := openAll(t, wrap(t, p, c), o)
			require.NoError(t, err, "%s %s", c, mode)
			assert.Equal(t, []Compression{c}, s.Compressions)
			assert.Equal(t, "01234\x0056789", string(got))
		}
	}
	// A tiny qcow2-looking stream is a truncated image, not raw.
	_, err := Open(context.Background(), strings.NewReader("QFI\xfb\x00\x00\x00\x03"), Options{})
	require.ErrorIs(t, err, errdefs.ErrInvalidImage)
}

func TestOpenTruncatedAndCorrupt(t *testing.T) {
	dir, raw := variedRaw(t, 2<<20, 8)
	modes := xzModes(t)
	for _, c := range []Compression{Gzip, XZ, Zstd, LZ4} {
		full, err := os.ReadFile(wrap(t, raw, c))
		require.NoError(t, err)
		for _, cut := range []int{20, 100, len(full) / 3, len(full) / 2, len(full) - 1, len(full) - 8, len(full) - 13} {
			p := filepath.Join(dir, "cut")
			require.NoError(t, os.WriteFile(p, full[:cut], 0o644))
			for mode, o := range modes {
				_, _, err := openAll(t, p, o)
				require.Error(t, err, "%s cut at %d/%d (%s)", c, cut, len(full), mode)
				require.ErrorIs(t, err, errdefs.ErrInvalidImage, "%s cut at %d (%s): %v", c, cut, mode, err)
				require.Contains(t, err.Error(), codecName(c))
			}
		}
		// Flip a byte in the middle.
		bad := append([]byte(nil), full...)
		bad[len(bad)/2] ^= 0x55
		p := filepath.Join(dir, "bad")
		require.NoError(t, os.WriteFile(p, bad, 0o644))
		for mode, o := range modes {
			_, _, err := openAll(t, p, o)
			require.ErrorIs(t, err, errdefs.ErrInvalidImage, "%s corrupt (%s)", c, mode)
		}
	}
}

// hugeDictXZ is a hand-made xz stream header and first block header whose
// LZMA2 filter asks for a 4 GiB dictionary, followed by junk.
func hugeDictXZ(dictByte byte) []byte {
	b := []byte{0xfd, '7', 'z', 'X', 'Z', 0, 0, 1}
	b = le32(b, crc32IEEE(b[6:8]))
	bh := []byte{0x02, 0x00, 0x21, 0x01, dictByte, 0, 0, 0} // size byte 2 → 12 bytes
	bh = le32(bh, crc32IEEE(bh))
	b = append(b, bh...)
	return append(b, bytes.Repeat([]byte{1, 0, 0}, 100)...)
}

func TestXZHugeDictionaryRefused(t *testing.T) {
	for mode, o := range xzModes(t) {
		_, err := Open(context.Background(), bytes.NewReader(hugeDictXZ(40)), o)
		require.ErrorIs(t, err, errdefs.ErrUnsafeImage, mode)
		require.ErrorContains(t, err, "dictionary")
		o.MaxXZDictionary = 1 << 20
		_, err = Open(context.Background(), bytes.NewReader(hugeDictXZ(20)), o) // 4 MiB
		require.ErrorIs(t, err, errdefs.ErrUnsafeImage, mode)
	}
	// A real xz -9 stream announces 64 MiB, which the default accepts.
	dict, ok, err := xzFirstDictSize(hugeDictXZ(22))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(8<<20), dict)
}

func TestZstdWindowLimit(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "d")
	writeRaw(t, p, variedContent(1<<20, 9))
	z := filepath.Join(dir, "d.zst")
	compressFile(t, p, z, "zstd", "-q", "--long=24")
	_, _, err := openAll(t, z, Options{MaxZstdWindow: 1 << 20})
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
	_, got, err := openAll(t, z, Options{})
	require.NoError(t, err)
	require.Len(t, got, 1<<20)
}

func TestOpenNestingLimit(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "d")
	writeRaw(t, p, variedContent(64<<10, 10))
	deep := wrap(t, p, Gzip, Zstd, Gzip, Zstd)
	_, _, err := openAll(t, deep, Options{})
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
	_, got, err := openAll(t, deep, Options{MaxNesting: 4})
	require.NoError(t, err)
	require.Len(t, got, 64<<10)
}

func TestOpenVirtualSizeLimit(t *testing.T) {
	needTool(t, "qemu-img")
	dir := t.TempDir()
	p := filepath.Join(dir, "big.qcow2")
	run(t, "qemu-img", "create", "-f", "qcow2", p, "3G")
	_, _, err := openAll(t, p, Options{MaxVirtualSize: 2 << 30})
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
	s, _, err := openAll(t, p, Options{})
	require.NoError(t, err)
	assert.Equal(t, int64(3<<30), s.Header.VirtualSize)
}

// failingReader yields part of a stream, then a source error.
type failingReader struct {
	r    io.Reader
	left int
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.left <= 0 {
		return 0, f.err
	}
	n, err := f.r.Read(p[:min(len(p), f.left)])
	f.left -= n
	return n, err
}

func TestSourceErrorPassesThrough(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "d")
	writeRaw(t, p, variedContent(2<<20, 11))
	srcErr := errors.New("connection reset by test")
	modes := xzModes(t)
	for _, c := range []Compression{Gzip, XZ, Zstd} {
		full, err := os.ReadFile(wrap(t, p, c))
		require.NoError(t, err)
		for mode, o := range modes {
			s, err := Open(context.Background(), &failingReader{r: bytes.NewReader(full), left: len(full) / 2, err: srcErr}, o)
			if err == nil {
				_, err = io.Copy(io.Discard, s)
				s.Close()
			}
			require.ErrorIs(t, err, srcErr, "%s %s", c, mode)
			require.NotErrorIs(t, err, errdefs.ErrInvalidImage, "%s %s", c, mode)
		}
	}
}

// childPIDs lists our child processes.
func childPIDs(t *testing.T) []string {
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	var pids []string
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err == nil {
			pids = append(pids, strings.Fields(string(b))...)
		}
	}
	return pids
}

// waitGoroutines waits until no more than base goroutines run (the
// external xz's copiers end with its process, on real time: no bubble
// holds a child process); the deadline is far past any machine's
// slowness, since the wait ends as soon as they are gone.
func waitGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), base, "goroutines leaked")
}

func TestExternalXZNoLeaks(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "d")
	writeRaw(t, p, variedContent(8<<20, 12))
	full, err := os.ReadFile(wrap(t, p, XZ))
	require.NoError(t, err)
	modes := xzModes(t)
	delete(modes, "go")
	if len(modes) == 0 {
		t.Skip("neither xz nor diskimport-inflate is here: no xz child to leak")
	}
	for mode, o := range modes {
		t.Run(mode, func(t *testing.T) { checkXZChildLeaksNothing(t, full, o) })
	}
}

// checkXZChildLeaksNothing decodes full (8 MiB of xz) with the child o
// selects, stopped early, to the end, cancelled, and refused before it
// starts: no child process and no goroutine outlives any of them.
func checkXZChildLeaksNothing(t *testing.T, full []byte, o Options) {
	base := runtime.NumGoroutine()
	before := len(childPIDs(t))

	// Stop early: Close kills the child and reports nothing.
	s, err := Open(context.Background(), bytes.NewReader(full), o)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.Greater(t, len(childPIDs(t)), before, "xz child should be running")
	_, err = io.CopyN(io.Discard, s, 1<<20)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.Len(t, childPIDs(t), before)
	waitGoroutines(t, base)

	// Finished stream: Close is a no-op.
	s, err = Open(context.Background(), bytes.NewReader(full), o)
	require.NoError(t, err)
	n, err := io.Copy(io.Discard, s)
	require.NoError(t, err)
	require.Equal(t, int64(8<<20), n)
	require.NoError(t, s.Close())
	require.Len(t, childPIDs(t), before)
	waitGoroutines(t, base)

	// Cancel mid-stream: the read fails with ErrCancelled.
	ctx, cancel := context.WithCancel(context.Background())
	s, err = Open(ctx, bytes.NewReader(full), o)
	require.NoError(t, err)
	_, err = io.CopyN(io.Discard, s, 1<<20)
	require.NoError(t, err)
	cancel()
	_, err = io.Copy(io.Discard, s)
	require.ErrorIs(t, err, errdefs.ErrCancelled)
	require.NoError(t, s.Close())
	require.Len(t, childPIDs(t), before)
	waitGoroutines(t, base)

	// Refused before start: no child at all.
	_, err = Open(context.Background(), bytes.NewReader(hugeDictXZ(40)), o)
	require.Error(t, err)
	require.Len(t, childPIDs(t), before)
	waitGoroutines(t, base)
}

func TestXZBinaryFailureReportsStderr(t *testing.T) {
	// A valid stream header, then garbage: the child reports its own
	// error (xz's "Compressed data is corrupt", ours "corrupt data").
	b := hugeDictXZ(16)
	for mode, o := range xzModes(t) {
		if mode == "go" {
			continue
		}
		_, err := Open(context.Background(), bytes.NewReader(b), o)
		require.ErrorIs(t, err, errdefs.ErrInvalidImage, mode)
		require.ErrorContains(t, err, "xz: ", mode)
		require.ErrorContains(t, err, "orrupt", mode)
	}
}

// TestTruncationSweep cuts small compressed streams at many points (every
// byte of the headers, then spread over the body): every cut must fail,
// none may end in a clean EOF.
func TestTruncationSweep(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "d")
	writeRaw(t, p, variedContent(256<<10, 13))
	modes := xzModes(t)
	for _, c := range []Compression{Gzip, XZ, Zstd} {
		full, err := os.ReadFile(wrap(t, p, c))
		require.NoError(t, err)
		var cuts []int
		magicLen := map[Compression]int{Gzip: 2, XZ: 6, Zstd: 4}[c]
		for i := magicLen; i < 80; i++ {
			cuts = append(cuts, i)
		}
		for i := 80; i < len(full); i += len(full) / 40 {
			cuts = append(cuts, i)
		}
		for i := len(full) - 40; i < len(full); i++ {
			cuts = append(cuts, i)
		}
		for mode, o := range modes {
			if c != XZ && mode != "go" {
				continue
			}
			for _, cut := range cuts {
				s, err := Open(context.Background(), bytes.NewReader(full[:cut]), o)
				if err == nil {
					_, err = io.Copy(io.Discard, s)
					s.Close()
				}
				require.ErrorIs(t, err, errdefs.ErrInvalidImage, "%s cut at %d/%d (%s)", c, cut, len(full), mode)
			}
		}
	}
}

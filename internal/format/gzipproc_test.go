package format

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/iostage"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

func gzipMember(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// gzipChild is an external gzip decoder under test: igzip through its
// pipe, or diskimport-inflate through its ring.
type gzipChild struct {
	name string
	o    Options
	ring bool
}

// gzipChildren are the external gzip decoders this machine has, each
// chosen alone (the other turned off); each one missing is skipped with
// its reason, and with neither the test skips.
func gzipChildren(t *testing.T) []gzipChild {
	t.Helper()
	var cs []gzipChild
	if p, err := exec.LookPath("igzip"); err == nil {
		cs = append(cs, gzipChild{"igzip", Options{ExternalGzip: p, InflateChild: "-"}, false})
	} else {
		t.Logf("igzip (Debian package isal) not installed, its pipe is not tested: %v", err)
	}
	if p := testimg.InflateChild(t); p != "" {
		cs = append(cs, gzipChild{"diskimport-inflate", Options{ExternalGzip: "-", InflateChild: p}, true})
	}
	if len(cs) == 0 {
		t.Skip("neither igzip nor diskimport-inflate is here: the external gzip decoders are not tested")
	}
	return cs
}

// decodeGzip decodes z with the decoder o selects and checks that it is
// the one asked for: the child c, or Go's when c is nil.
func decodeGzip(t *testing.T, c *gzipChild, z []byte) ([]byte, error) {
	t.Helper()
	if c == nil {
		return decodeBy(t, Gzip, Options{ExternalGzip: "-", InflateChild: "-"}, z, "Go", false, false)
	}
	return decodeBy(t, Gzip, c.o, z, c.name, true, c.ring)
}

// decodeBy decodes z (compressed with c) with the decoder o selects and
// checks that it is the one name says: a child or Go's, reading a ring or
// a pipe.
func decodeBy(t *testing.T, c Compression, o Options, z []byte, name string, child, ring bool) ([]byte, error) {
	t.Helper()
	d, err := NewDecompressor(context.Background(), c, bytes.NewReader(z), o)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	p, isChild := d.(*decoder).r.(*childProc)
	require.Equal(t, child, isChild, "%s decodes in a child", name)
	if isChild {
		_, isRing := p.stdout.(*ringReader)
		require.Equal(t, ring, isRing, "%s reads a ring", name)
	}
	return io.ReadAll(d)
}

func TestGzipChildrenMatchGoDecoder(t *testing.T) {
	children := gzipChildren(t)
	a, b := variedContent(6<<20, 31), variedContent(3<<20, 32)
	cases := map[string]struct {
		z    []byte
		want []byte
	}{
		"single member": {gzipMember(t, a), a},
		"two members":   {append(gzipMember(t, a), gzipMember(t, b)...), append(append([]byte{}, a...), b...)},
		"empty member":  {gzipMember(t, nil), []byte{}},
		"empty between": {append(append(gzipMember(t, a), gzipMember(t, nil)...), gzipMember(t, b)...), append(append([]byte{}, a...), b...)},
		// Exactly the ring's slots: the last slot full, nothing after it.
		"a whole ring": {gzipMember(t, variedContent(ringSlots*ringSlotBytes, 37)), variedContent(ringSlots*ringSlotBytes, 37)},
	}
	// Runs of zeros off the diskimport-inflate child's 64 KiB granules,
	// a member ending in one: its CRC folds in the granules of zeros and
	// runs the rest, data and zeros, through the CRC.
	za, zb := offGranuleZeros(5<<20, 38), offGranuleZeros(2<<20+3, 39)
	cases["zeros off the granules"] = struct{ z, want []byte }{append(gzipMember(t, za), gzipMember(t, zb)...), append(bytes.Clone(za), zb...)}
	if pigz, err := exec.LookPath("pigz"); err == nil {
		// pigz compresses blocks in parallel into one member; two runs
		// concatenated make the multi-member file pigz users produce.
		dir := t.TempDir()
		pa, pb := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		require.NoError(t, os.WriteFile(pa, a, 0o644))
		require.NoError(t, os.WriteFile(pb, b, 0o644))
		za := run(t, pigz, "-c", "-p", "2", "-b", "128", pa)
		zb := run(t, pigz, "-c", "-p", "2", "-b", "128", pb)
		cases["pigz members"] = struct{ z, want []byte }{append(append([]byte{}, za...), zb...), append(append([]byte{}, a...), b...)}
	} else {
		t.Logf("pigz not installed, its multi-member case is not tested: %v", err)
	}
	for name, c := range cases {
		goOut, err := decodeGzip(t, nil, c.z)
		require.NoError(t, err, "%s: Go decoder", name)
		require.True(t, bytes.Equal(c.want, goOut), "%s: Go decoder output differs", name)
		for _, ch := range children {
			out, err := decodeGzip(t, &ch, c.z)
			require.NoError(t, err, "%s: %s", name, ch.name)
			require.True(t, bytes.Equal(goOut, out), "%s: %s output (%d bytes) differs from Go's (%d)", name, ch.name, len(out), len(goOut))
		}
	}
}

// offGranuleZeros is n bytes of data and runs of zeros (one of 300 KiB,
// others of a few granules) that start and end off 64 KiB boundaries and
// end in zeros.
func offGranuleZeros(n int, seed uint64) []byte {
	b := variedContent(n, seed)
	for off, run := 12345, 300<<10; off < n; off, run = off+run+70001, 3*(64<<10)+999 {
		clear(b[off:min(off+run, n)])
	}
	clear(b[n-100<<10:])
	return b
}

func TestGzipChildrenRefuseCorruptAndTruncated(t *testing.T) {
	children := gzipChildren(t)
	a := variedContent(4<<20, 33)
	good := gzipMember(t, a)
	crc := bytes.Clone(good)
	crc[len(crc)-6] ^= 0x40 // inside the CRC32 of the trailer
	size := bytes.Clone(good)
	size[len(size)-2] ^= 0x01 // inside ISIZE
	// A second member with a bad CRC after a good one: every member is checked.
	second := append(bytes.Clone(good), crc...)
	// Mostly zeros: the child folds granules of zeros into the CRC.
	zeros := gzipMember(t, offGranuleZeros(3<<20, 40))
	zeros[len(zeros)-8] ^= 0x01
	for name, z := range map[string][]byte{"crc": crc, "isize": size, "second member crc": second, "crc of zeros": zeros} {
		_, err := decodeGzip(t, nil, z)
		require.ErrorIs(t, err, errdefs.ErrInvalidImage, "%s with Go", name)
		for _, ch := range children {
			_, err := decodeGzip(t, &ch, z)
			require.ErrorIs(t, err, errdefs.ErrInvalidImage, "%s with %s", name, ch.name)
			require.ErrorContains(t, err, "checksum", "%s with %s", name, ch.name)
		}
	}
	for _, cut := range []int{len(good) / 2, len(good) - 4, 12} {
		_, err := decodeGzip(t, nil, good[:cut])
		require.ErrorIs(t, err, errdefs.ErrInvalidImage, "cut at %d with Go", cut)
		require.ErrorContains(t, err, "truncated", "cut at %d with Go", cut)
		for _, ch := range children {
			_, err := decodeGzip(t, &ch, good[:cut])
			require.ErrorIs(t, err, errdefs.ErrInvalidImage, "cut at %d with %s", cut, ch.name)
			require.ErrorContains(t, err, "truncated", "cut at %d with %s", cut, ch.name)
		}
	}
}

// TestGzipChildrenIgnoreTrailingBytes pins where the decoders differ:
// bytes after the last member that do not start another one fail the Go
// decoder and are ignored by igzip and diskimport-inflate, whose output
// is still the whole, checked data.
func TestGzipChildrenIgnoreTrailingBytes(t *testing.T) {
	children := gzipChildren(t)
	a := variedContent(1<<20, 34)
	z := append(gzipMember(t, a), "trailing garbage"...)
	_, err := decodeGzip(t, nil, z)
	require.ErrorIs(t, err, errdefs.ErrInvalidImage)
	for _, ch := range children {
		out, err := decodeGzip(t, &ch, z)
		require.NoError(t, err, ch.name)
		require.True(t, bytes.Equal(a, out), ch.name)
		// Trailing bytes that look like another member are decoded as one.
		_, err = decodeGzip(t, &ch, append(gzipMember(t, a), 0x1f, 0x8b, 8, 0))
		require.ErrorIs(t, err, errdefs.ErrInvalidImage, ch.name)
	}
}

// blockingReader yields r, then blocks until ctx ends (a slow source).
type blockingReader struct {
	ctx context.Context
	r   io.Reader
}

func (b *blockingReader) Read(p []byte) (int, error) {
	if n, err := b.r.Read(p); n > 0 || err != io.EOF {
		return n, err
	}
	<-b.ctx.Done()
	return 0, b.ctx.Err()
}

func TestGzipChildrenCancelAndClose(t *testing.T) {
	for _, ch := range gzipChildren(t) {
		t.Run(ch.name, func(t *testing.T) {
			z := gzipMember(t, variedContent(16<<20, 35))
			base := runtime.NumGoroutine()
			before := len(childPIDs(t))

			// Cancelled while the source stalls halfway: the read fails with
			// ErrCancelled, the child is killed and reaped.
			ctx, cancel := context.WithCancel(context.Background())
			d, err := NewDecompressor(ctx, Gzip, &blockingReader{ctx: ctx, r: bytes.NewReader(z[:len(z)/2])}, ch.o)
			require.NoError(t, err)
			p := d.(*decoder).r.(*childProc)
			_, err = io.CopyN(io.Discard, d, 1<<20)
			require.NoError(t, err)
			require.Greater(t, len(childPIDs(t)), before, "the child should be running")
			cancel()
			_, err = io.Copy(io.Discard, d)
			require.ErrorIs(t, err, errdefs.ErrCancelled)
			require.NoError(t, d.Close())
			require.True(t, p.child.Reaped(), "child reaped")
			require.Len(t, childPIDs(t), before)
			waitGoroutines(t, base)

			// Closed early by the caller: no error, child gone.
			d, err = NewDecompressor(context.Background(), Gzip, bytes.NewReader(z), ch.o)
			require.NoError(t, err)
			p = d.(*decoder).r.(*childProc)
			_, err = io.CopyN(io.Discard, d, 1<<20)
			require.NoError(t, err)
			require.NoError(t, d.Close())
			require.True(t, p.child.Reaped(), "child reaped")
			require.Len(t, childPIDs(t), before)
			waitGoroutines(t, base)
		})
	}
}

func TestGzipWithoutIgzipUsesGo(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no igzip, no diskimport-inflate here
	require.Equal(t, "", Options{}.gzipBinary())
	require.Equal(t, "", Options{}.InflateChildPath())
	a := variedContent(2<<20, 36)
	d, err := NewDecompressor(context.Background(), Gzip, bytes.NewReader(gzipMember(t, a)), Options{})
	require.NoError(t, err)
	defer d.Close()
	_, isGo := d.(*decoder).r.(*gzip.Reader)
	require.True(t, isGo, "the Go decoder is used when igzip is not on PATH")
	out, err := io.ReadAll(d)
	require.NoError(t, err)
	require.True(t, bytes.Equal(a, out))
	// An explicit "-" also keeps the Go decoder whatever PATH holds.
	require.Equal(t, "", Options{ExternalGzip: "-"}.gzipBinary())
	require.Equal(t, "", Options{InflateChild: "-"}.InflateChildPath())
}

// storedMember is a gzip member (stored, uncompressed blocks) of exactly
// size bytes, with varied content.
func storedMember(t *testing.T, size int, seed uint64) (member, data []byte) {
	t.Helper()
	for n := size - 64; n > 0; n-- {
		data = variedContent(n, seed)
		var buf bytes.Buffer
		zw, err := gzip.NewWriterLevel(&buf, gzip.NoCompression)
		require.NoError(t, err)
		_, err = zw.Write(data)
		require.NoError(t, err)
		require.NoError(t, zw.Close())
		if buf.Len() == size {
			return buf.Bytes(), data
		}
	}
	t.Fatalf("no stored member of %d bytes", size)
	return nil, nil
}

// A member may start on any byte of the diskimport-inflate child's input
// slots, its magic split across two of them (the first member ending one
// byte before a slot's end), and what trails the last member is ignored
// wherever it starts, as before the input ring (igzip, which has no
// slots, calls one trailing 0x1f a cut member).
func TestInflateChildFindsMembersAcrossInputSlots(t *testing.T) {
	var children []gzipChild
	for _, c := range gzipChildren(t) {
		if c.ring {
			children = append(children, c)
		}
	}
	if len(children) == 0 {
		t.Skip("diskimport-inflate is not here (make native): its input slots are not tested")
	}
	b := variedContent(100<<10, 41)
	second := gzipMember(t, b)
	for _, before := range []int{0, 1, 2, 3} {
		first, a := storedMember(t, 2*inRingSlotBytes-before, uint64(42+before))
		for name, c := range map[string]struct{ z, want []byte }{
			"two members":      {append(bytes.Clone(first), second...), append(bytes.Clone(a), b...)},
			"one trailing 1f":  {append(bytes.Clone(first), 0x1f), a},
			"trailing 1f 00":   {append(bytes.Clone(first), 0x1f, 0x00, 0x8b), a},
			"trailing garbage": {append(bytes.Clone(first), "garbage"...), a},
		} {
			for _, ch := range children {
				out, err := decodeGzip(t, &ch, c.z)
				require.NoError(t, err, "%s, the first member ending %d bytes before a slot's end, %s", name, before, ch.name)
				require.True(t, bytes.Equal(c.want, out), "%s, %d bytes before, %s: output (%d bytes) differs", name, before, ch.name, len(out))
			}
		}
	}
}

// diskimport-inflate names the 64 KiB granules of zeros it decoded, and
// the decoder gives them as runs: every whole granule of zeros a member
// holds whole comes as a run, nothing else does, and the runs and bytes
// together are the member's bytes.
func TestInflateChildGivesItsGranulesOfZerosAsRuns(t *testing.T) {
	bin := testimg.InflateChild(t)
	if bin == "" {
		t.Skip("diskimport-inflate is not here")
	}
	const g = ringZeroGranule
	// Granules of zeros and of data, a run off the granules, and a second
	// member starting inside a granule of zeros (which is then not whole
	// in either member), over three slots.
	a := variedContent(9*ringSlotBytes/4+g/2, 61)
	for i := 0; i+g <= len(a); i += g {
		if (i/g)%3 != 1 {
			clear(a[i : i+g])
		}
	}
	copy(a[5*g+100:], "data")
	clear(a[len(a)-g/2:])
	b := make([]byte, 3*g+777)
	copy(b[2*g:], variedContent(g, 62))
	want := append(bytes.Clone(a), b...)
	wantRuns := int64(0)
	for i := 0; i+g <= len(want); i += g {
		insideB := i < len(a) && i+g > len(a)
		if !insideB && iostage.IsZero(want[i:i+g]) {
			wantRuns += g
		}
	}
	d, err := NewDecompressor(context.Background(), Gzip, bytes.NewReader(append(gzipMember(t, a), gzipMember(t, b)...)),
		Options{InflateChild: bin, ExternalGzip: "-"})
	require.NoError(t, err)
	defer d.Close()
	require.True(t, iostage.KnowsRuns(d))
	var got []byte
	var runs int64
	buf := make([]byte, 1<<20)
	for {
		n, zeros, err := iostage.ReadRun(d, buf)
		runs += zeros
		got = append(got, make([]byte, zeros)...)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
	}
	require.True(t, bytes.Equal(want, got), "decoded %d bytes, want %d", len(got), len(want))
	require.Equal(t, wantRuns, runs, "the bytes given as runs")
}

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
)

// needIgzip skips igzip-specific tests where ISA-L's igzip is missing.
func needIgzip(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("igzip")
	if err != nil {
		t.Skipf("igzip (Debian package isal) not installed, the external gzip decoder is not tested: %v", err)
	}
	return p
}

func gzipMember(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// decodeGzip decodes z with the decoder bin selects ("-" is Go) and
// checks that the decoder is the one asked for.
func decodeGzip(t *testing.T, bin string, z []byte) ([]byte, error) {
	t.Helper()
	d, err := NewDecompressor(context.Background(), Gzip, bytes.NewReader(z), Options{ExternalGzip: bin})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	_, isChild := d.(*decoder).r.(*childProc)
	require.Equal(t, bin != "-", isChild, "decoder for ExternalGzip=%q", bin)
	return io.ReadAll(d)
}

func TestIgzipMatchesGoDecoder(t *testing.T) {
	bin := needIgzip(t)
	a, b := variedContent(6<<20, 31), variedContent(3<<20, 32)
	cases := map[string]struct {
		z    []byte
		want []byte
	}{
		"single member": {gzipMember(t, a), a},
		"two members":   {append(gzipMember(t, a), gzipMember(t, b)...), append(append([]byte{}, a...), b...)},
		"empty member":  {gzipMember(t, nil), []byte{}},
		"empty between": {append(append(gzipMember(t, a), gzipMember(t, nil)...), gzipMember(t, b)...), append(append([]byte{}, a...), b...)},
	}
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
		goOut, err := decodeGzip(t, "-", c.z)
		require.NoError(t, err, "%s: Go decoder", name)
		require.True(t, bytes.Equal(c.want, goOut), "%s: Go decoder output differs", name)
		out, err := decodeGzip(t, bin, c.z)
		require.NoError(t, err, "%s: igzip", name)
		require.True(t, bytes.Equal(goOut, out), "%s: igzip output (%d bytes) differs from Go's (%d)", name, len(out), len(goOut))
	}
}

func TestIgzipCorruptAndTruncated(t *testing.T) {
	bin := needIgzip(t)
	a := variedContent(4<<20, 33)
	good := gzipMember(t, a)
	crc := bytes.Clone(good)
	crc[len(crc)-6] ^= 0x40 // inside the CRC32 of the trailer
	size := bytes.Clone(good)
	size[len(size)-2] ^= 0x01 // inside ISIZE
	// A second member with a bad CRC after a good one: every member is checked.
	second := append(bytes.Clone(good), crc...)
	for name, z := range map[string][]byte{"crc": crc, "isize": size, "second member crc": second} {
		for _, b := range []string{"-", bin} {
			_, err := decodeGzip(t, b, z)
			require.ErrorIs(t, err, errdefs.ErrInvalidImage, "%s with %s", name, b)
			if b == bin {
				require.ErrorContains(t, err, "checksum", name)
			}
		}
	}
	for _, cut := range []int{len(good) / 2, len(good) - 4, 12} {
		for _, b := range []string{"-", bin} {
			_, err := decodeGzip(t, b, good[:cut])
			require.ErrorIs(t, err, errdefs.ErrInvalidImage, "cut at %d with %s", cut, b)
			require.ErrorContains(t, err, "truncated", "cut at %d with %s", cut, b)
		}
	}
}

// TestIgzipTrailingBytes pins where the two decoders differ: bytes after
// the last member that do not start another one fail the Go decoder and
// are ignored by igzip, whose output is still the whole, checked data.
func TestIgzipTrailingBytes(t *testing.T) {
	bin := needIgzip(t)
	a := variedContent(1<<20, 34)
	z := append(gzipMember(t, a), "trailing garbage"...)
	_, err := decodeGzip(t, "-", z)
	require.ErrorIs(t, err, errdefs.ErrInvalidImage)
	out, err := decodeGzip(t, bin, z)
	require.NoError(t, err)
	require.True(t, bytes.Equal(a, out))
	// Trailing bytes that look like another member are decoded as one.
	_, err = decodeGzip(t, bin, append(gzipMember(t, a), 0x1f, 0x8b, 8, 0))
	require.ErrorIs(t, err, errdefs.ErrInvalidImage)
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

func TestIgzipCancelAndClose(t *testing.T) {
	bin := needIgzip(t)
	z := gzipMember(t, variedContent(16<<20, 35))
	o := Options{ExternalGzip: bin}
	base := runtime.NumGoroutine()
	before := len(childPIDs(t))

	// Cancelled while the source stalls halfway: the read fails with
	// ErrCancelled, the child is killed and reaped.
	ctx, cancel := context.WithCancel(context.Background())
	d, err := NewDecompressor(ctx, Gzip, &blockingReader{ctx: ctx, r: bytes.NewReader(z[:len(z)/2])}, o)
	require.NoError(t, err)
	p := d.(*decoder).r.(*childProc)
	_, err = io.CopyN(io.Discard, d, 1<<20)
	require.NoError(t, err)
	require.Greater(t, len(childPIDs(t)), before, "igzip child should be running")
	cancel()
	_, err = io.Copy(io.Discard, d)
	require.ErrorIs(t, err, errdefs.ErrCancelled)
	require.NoError(t, d.Close())
	require.True(t, p.child.Reaped(), "child reaped")
	require.Len(t, childPIDs(t), before)
	waitGoroutines(t, base)

	// Closed early by the caller: no error, child gone.
	d, err = NewDecompressor(context.Background(), Gzip, bytes.NewReader(z), o)
	require.NoError(t, err)
	p = d.(*decoder).r.(*childProc)
	_, err = io.CopyN(io.Discard, d, 1<<20)
	require.NoError(t, err)
	require.NoError(t, d.Close())
	require.True(t, p.child.Reaped(), "child reaped")
	require.Len(t, childPIDs(t), before)
	waitGoroutines(t, base)
}

func TestGzipWithoutIgzipUsesGo(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no igzip here
	require.Equal(t, "", Options{}.gzipBinary())
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
}

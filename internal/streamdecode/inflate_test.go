package streamdecode

import (
	"bytes"
	"compress/zlib"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

func zlibStream(t *testing.T, p []byte, level int) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := zlib.NewWriterLevel(&b, level)
	require.NoError(t, err)
	_, err = w.Write(p)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return b.Bytes()
}

func TestVMDKGrainInflatesOnlyWhenItsZlibStreamIsWhole(t *testing.T) {
	grain := make([]byte, 64<<10)
	for i := range grain {
		grain[i] = byte(i*31 + i>>11)
	}
	good := zlibStream(t, grain, zlib.BestSpeed)
	stored := zlibStream(t, grain[:1000], zlib.NoCompression)
	var d decoder
	defer d.close()
	out := make([]byte, len(grain))

	// A stream, a stored one and a short one, each followed by a sector's
	// padding as in a vmdk, on one decoder in turn.
	for _, c := range []struct {
		in   []byte
		want []byte
	}{{good, grain}, {stored, grain[:1000]}, {zlibStream(t, grain[:3], 9), grain[:3]}, {good, grain}} {
		in := append(append([]byte{}, c.in...), make([]byte, 511)...)
		n, err := d.inflate(codecZlib, in, out)
		require.NoError(t, err)
		require.Equal(t, c.want, out[:n])
	}

	bad := func(edit func([]byte) []byte) error {
		_, err := d.inflate(codecZlib, edit(append([]byte{}, good...)), out)
		return err
	}
	flip := func(i int) func([]byte) []byte {
		return func(b []byte) []byte { b[(i+len(b))%len(b)] ^= 0x01; return b }
	}
	require.ErrorIs(t, bad(flip(-1)), zlib.ErrChecksum, "the Adler-32's last byte")
	require.ErrorIs(t, bad(flip(-4)), zlib.ErrChecksum, "the Adler-32's first byte")
	require.ErrorIs(t, bad(func(b []byte) []byte { return b[:len(b)-2] }), io.ErrUnexpectedEOF, "half a checksum")
	require.Error(t, bad(func(b []byte) []byte { return b[:len(b)/2] }), "the deflate stream cut")
	require.ErrorIs(t, bad(flip(0)), zlib.ErrHeader, "not deflate")
	require.ErrorIs(t, bad(func(b []byte) []byte { b[1] |= 0x20; b[1] += byte(31 - int(uint16(b[0])<<8|uint16(b[1]))%31); return b }), zlib.ErrDictionary, "a preset dictionary")
	require.ErrorIs(t, bad(func(b []byte) []byte { return b[:1] }), io.ErrUnexpectedEOF, "one byte")
	_, err := d.inflate(codecZlib, good, out[:len(out)-1])
	require.ErrorContains(t, err, "inflates to more than", "a grain longer than its buffer")
}

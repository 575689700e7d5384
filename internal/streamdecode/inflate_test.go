package streamdecode

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/testkit/testimg"
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

// TestInflateChildAgreesWithGo: the diskimport-inflate child and Go's
// inflaters take and refuse the same grains and clusters: each whole,
// stored or padded block inflates to the same bytes, a cut cluster is
// short in both (where each stops in it may differ), and each
// damaged one (checksum, header, dictionary, cut, longer than its
// output) fails with ErrInvalidImage in both, one block's failure
// leaving the next one whole.
func TestInflateChildAgreesWithGo(t *testing.T) {
	bin := testimg.InflateChild(t)
	if bin == "" {
		t.Skip("diskimport-inflate is not here (see the log above)")
	}
	grain := make([]byte, 64<<10)
	for i := range grain {
		grain[i] = byte(i*31 + i>>11)
	}
	good := zlibStream(t, grain, zlib.BestSpeed)
	edit := func(f func([]byte) []byte) []byte { return f(append([]byte{}, good...)) }
	flip := func(i int) []byte { return edit(func(b []byte) []byte { b[(i+len(b))%len(b)] ^= 0x01; return b }) }
	var raw bytes.Buffer
	fw, err := flate.NewWriter(&raw, flate.BestSpeed)
	require.NoError(t, err)
	_, err = fw.Write(grain)
	require.NoError(t, err)
	require.NoError(t, fw.Close())
	deflated := raw.Bytes()

	type block struct {
		name   string
		in     []byte
		outLen int
	}
	cases := map[codec][]block{
		codecZlib: {
			{"whole", good, len(grain)},
			{"padded", append(append([]byte{}, good...), make([]byte, 511)...), len(grain)},
			{"stored", zlibStream(t, grain[:1000], zlib.NoCompression), len(grain)},
			{"short", zlibStream(t, grain[:3], 9), len(grain)},
			{"checksum", flip(-1), len(grain)},
			{"good after a bad one", good, len(grain)},
			{"half a checksum", good[:len(good)-2], len(grain)},
			{"cut", good[:len(good)/2], len(grain)},
			{"not deflate", flip(0), len(grain)},
			{"dictionary", edit(func(b []byte) []byte { b[1] |= 0x20; b[1] += byte(31 - int(uint16(b[0])<<8|uint16(b[1]))%31); return b }), len(grain)},
			{"one byte", good[:1], len(grain)},
			{"longer than its output", good, len(grain) - 1},
			{"exactly its output", good, len(grain)},
			{"empty", nil, len(grain)},
		},
		codecDeflate: {
			{"whole", deflated, len(grain)},
			{"the first bytes of a longer one", deflated, 4096},
			{"trailing bytes", append(append([]byte{}, deflated...), 1, 2, 3), len(grain)},
			{"cut: short", deflated[:len(deflated)/2], len(grain)},
			{"garbage", bytes.Repeat([]byte{0xff}, 300), len(grain)},
			{"good after garbage", deflated, len(grain)},
			{"empty", nil, len(grain)},
			{"good after an empty one", deflated, len(grain)},
		},
	}
	for c, blocks := range cases {
		bc := format.BlockDeflate
		if c == codecZlib {
			bc = format.BlockZlib
		}
		bi, err := format.StartBlockInflater(context.Background(), bc, len(grain), format.Options{InflateChild: bin})
		require.NoError(t, err)
		require.NotNil(t, bi)
		// Sent from another goroutine, as the decoders send: Send waits
		// for an input slot the child is done with.
		sent := make(chan error, 1)
		go func() {
			for _, b := range blocks {
				if err := bi.Send(b.in, b.outLen); err != nil {
					sent <- err
					return
				}
			}
			sent <- bi.CloseSend()
		}()
		var d decoder
		for _, b := range blocks {
			goOut := make([]byte, b.outLen)
			gn, gerr := d.inflate(c, b.in, goOut)
			out := make([]byte, b.outLen)
			n, err := bi.Receive(out)
			if gerr != nil {
				require.ErrorIs(t, err, errdefs.ErrInvalidImage, "%v %s: Go refused it (%v)", c, b.name, gerr)
				continue
			}
			if gn == 0 && err != nil {
				// Nothing at all, which the child refuses outright.
				require.ErrorIs(t, err, errdefs.ErrInvalidImage, "%v %s", c, b.name)
				continue
			}
			require.NoError(t, err, "%v %s", c, b.name)
			if gn < b.outLen {
				// Short, which the decoders refuse (want): the two may stop
				// at different points of a cut stream, not past it.
				require.Less(t, n, b.outLen, "%v %s: short in Go (%d bytes)", c, b.name, gn)
				k := min(gn, n)
				require.True(t, bytes.Equal(goOut[:k], out[:k]), "%v %s: the bytes", c, b.name)
				continue
			}
			require.Equal(t, gn, n, "%v %s: bytes inflated", c, b.name)
			require.True(t, bytes.Equal(goOut[:gn], out[:n]), "%v %s: the bytes", c, b.name)
		}
		d.close()
		require.NoError(t, <-sent)
		_, err = bi.Receive(make([]byte, 10))
		require.Error(t, err, "no block after the last")
		require.NoError(t, bi.Close())
	}
}

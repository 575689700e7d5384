package format

import (
	"bytes"
	"encoding/binary"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
)

// xzOf compresses b with the xz tool and args.
func xzOf(t *testing.T, b []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(needTool(t, "xz"), append([]string{"-c"}, args...)...)
	cmd.Stdin = bytes.NewReader(b)
	out, err := cmd.Output()
	require.NoError(t, err, "xz %v", args)
	return out
}

// decodeXZ decodes z with the decoder o selects and checks that it is the
// one mode names: the ring child reads a ring, the xz tool a pipe, Go no
// child at all.
func decodeXZ(t *testing.T, mode string, o Options, z []byte) ([]byte, error) {
	t.Helper()
	return decodeBy(t, XZ, o, z, mode, mode != "go", mode == "ring")
}

func TestXZDecodersAgree(t *testing.T) {
	modes := xzModes(t)
	if _, ok := modes["ring"]; !ok {
		t.Log("diskimport-inflate is not here (see above): its xz mode is not tested")
	}
	a, b := variedContent(6<<20, 51), offGranuleZeros(5<<20+3, 52)
	whole := variedContent(ringSlots*ringSlotBytes, 53)
	cases := map[string]struct{ z, want []byte }{
		"one block":      {xzOf(t, a, "-6"), a},
		"blocks of 1MiB": {xzOf(t, a, "-1", "-T2", "--block-size=1MiB"), a},
		"mostly zeros":   {xzOf(t, b, "-1"), b},
		// Exactly the ring's slots: the last slot full, nothing after it.
		"a whole ring": {xzOf(t, whole, "-0"), whole},
		// Concatenated streams with stream padding between them, as xz
		// writes a file compressed in parts.
		"two streams, padded": {append(append(xzOf(t, a, "-1"), 0, 0, 0, 0), xzOf(t, b, "-1", "-T2", "--block-size=1MiB")...),
			append(bytes.Clone(a), b...)},
		"no check":      {xzOf(t, a[:1<<20], "-1", "-C", "none"), a[:1<<20]},
		"CRC32 check":   {xzOf(t, a[:1<<20], "-1", "-C", "crc32"), a[:1<<20]},
		"SHA-256 check": {xzOf(t, a[:1<<20], "-1", "-C", "sha256"), a[:1<<20]},
	}
	for name, c := range cases {
		for mode, o := range modes {
			got, err := decodeXZ(t, mode, o, c.z)
			require.NoError(t, err, "%s: %s", name, mode)
			require.True(t, bytes.Equal(c.want, got), "%s: %s decoded %d bytes, not the %d compressed", name, mode, len(got), len(c.want))
		}
	}
}

// xzBlockCheck is where the single-block stream z keeps its block's check
// (CRC64, 8 bytes): just before the index, which the stream footer's
// backward size measures.
func xzBlockCheck(z []byte) int {
	footer := z[len(z)-12:]
	index := int(binary.LittleEndian.Uint32(footer[4:8])+1) * 4
	return len(z) - 12 - index - 8
}

func TestXZDecodersRefuseCorruptStreams(t *testing.T) {
	modes := xzModes(t)
	a := variedContent(2<<20, 54)
	good := xzOf(t, a, "-1")
	check := bytes.Clone(good)
	check[xzBlockCheck(check)+3] ^= 0x10
	padding := append(bytes.Clone(good), 0, 0, 0) // padding is whole 4-byte words
	garbage := append(bytes.Clone(good), "trailing garbage"...)
	for name, z := range map[string][]byte{"block check": check, "padding of 3": padding, "trailing bytes": garbage} {
		for mode, o := range modes {
			_, err := decodeXZ(t, mode, o, z)
			require.ErrorIs(t, err, errdefs.ErrInvalidImage, "%s: %s", name, mode)
			require.ErrorContains(t, err, "xz", "%s: %s", name, mode)
		}
	}
}

// TestXZChildrenRefuseALaterStreamsHugeDictionary: the dictionary check
// before the child starts reads the first block's header only; a second
// stream asking for a 4 GiB dictionary meets the child's own memory
// limit, and that is refused as unsafe.
func TestXZChildrenRefuseALaterStreamsHugeDictionary(t *testing.T) {
	modes := xzModes(t)
	delete(modes, "go")
	z := append(xzOf(t, variedContent(1<<20, 55), "-1"), hugeDictXZ(40)...)
	for mode, o := range modes {
		_, err := decodeXZ(t, mode, o, z)
		require.ErrorIs(t, err, errdefs.ErrUnsafeImage, mode)
		require.ErrorContains(t, err, "emory usage limit", mode)
	}
}

// TestXZChildrenHandOutWhatTheyDecodedBeforeAFault: a cut stream's bytes
// decoded before the cut come out before the error, from the ring child
// as from xz's pipe (a cut qcow2.xz then fails after its header was read,
// where the stream does).
func TestXZChildrenHandOutWhatTheyDecodedBeforeAFault(t *testing.T) {
	modes := xzModes(t)
	delete(modes, "go")
	a := variedContent(3<<20, 56) // less than a slot of the ring
	z := xzOf(t, a, "-0")
	cut := z[:len(z)*9/10]
	for mode, o := range modes {
		got, err := decodeXZ(t, mode, o, cut)
		require.ErrorIs(t, err, errdefs.ErrInvalidImage, mode)
		require.ErrorContains(t, err, "truncated", mode)
		require.Greater(t, len(got), len(a)/2, "%s: bytes decoded before the cut", mode)
		require.True(t, bytes.Equal(a[:len(got)], got), "%s: the bytes before the cut differ", mode)
	}
}

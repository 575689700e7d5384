package format

import (
	"bytes"
	"os/exec"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
)

// The indexes give the uncompressed size of a stream of several blocks
// and of several streams one after the other with stream padding (as
// `cat a.xz b.xz` and xz --list sum them); a file whose framing does not
// add up (a cut end, a flipped index byte, padding before the first
// stream, bytes that are no stream) is refused rather than guessed at.
func TestXZUncompressedSizeFromIndex(t *testing.T) {
	if _, err := exec.LookPath("xz"); err != nil {
		t.Skip("needs xz")
	}
	data := bytes.Repeat([]byte("disk image bytes "), 200000) // 3400000 bytes
	cmd := exec.Command("xz", "-T2", "--block-size=1MiB", "-c")
	cmd.Stdin = bytes.NewReader(data)
	xzb, err := cmd.Output()
	require.NoError(t, err)
	small, err := exec.Command("sh", "-c", "printf 'a second stream' | xz -c").Output()
	require.NoError(t, err)
	for name, c := range map[string]struct {
		b    []byte
		want int
	}{
		"one stream":            {xzb, len(data)},
		"two streams":           {append(bytes.Clone(xzb), small...), len(data) + 15},
		"three, padded between": {slices.Concat(small, []byte{0, 0, 0, 0}, xzb, small), len(data) + 30},
		"padding at the end":    {append(bytes.Clone(xzb), 0, 0, 0, 0, 0, 0, 0, 0), len(data)},
	} {
		n, err := XZUncompressedSize(bytes.NewReader(c.b), int64(len(c.b)))
		require.NoError(t, err, name)
		assert.EqualValues(t, c.want, n, name)
	}

	flipped := bytes.Clone(xzb)
	flipped[len(flipped)-20] ^= 1 // in the index
	for name, b := range map[string][]byte{
		"cut":               xzb[:len(xzb)-1],
		"flipped":           flipped,
		"tiny":              xzb[:20],
		"padding first":     append([]byte{0, 0, 0, 0}, xzb...),
		"odd padding":       append(bytes.Clone(xzb), 0, 0),
		"garbage before":    append([]byte("junk"), xzb...),
		"second stream cut": slices.Concat(small[:len(small)-4], xzb),
		"all zeros":         make([]byte, 64),
	} {
		_, err := XZUncompressedSize(bytes.NewReader(b), int64(len(b)))
		assert.ErrorIs(t, err, errdefs.ErrInvalidImage, name)
	}
}

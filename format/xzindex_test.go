package format

import (
	"bytes"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
)

// The index gives the uncompressed size of a stream of several blocks;
// a file whose framing does not add up (two streams, stream padding, a
// cut end, a flipped index byte) is refused rather than guessed at.
func TestXZUncompressedSizeFromIndex(t *testing.T) {
	if _, err := exec.LookPath("xz"); err != nil {
		t.Skip("needs xz")
	}
	data := bytes.Repeat([]byte("disk image bytes "), 200000) // 3400000 bytes
	cmd := exec.Command("xz", "-T2", "--block-size=1MiB", "-c")
	cmd.Stdin = bytes.NewReader(data)
	xzb, err := cmd.Output()
	require.NoError(t, err)
	n, err := XZUncompressedSize(bytes.NewReader(xzb), int64(len(xzb)))
	require.NoError(t, err)
	assert.EqualValues(t, len(data), n)

	flipped := bytes.Clone(xzb)
	flipped[len(flipped)-20] ^= 1 // in the index
	for name, b := range map[string][]byte{
		"two streams": append(bytes.Clone(xzb), xzb...),
		"padding":     append(bytes.Clone(xzb), 0, 0, 0, 0),
		"cut":         xzb[:len(xzb)-1],
		"flipped":     flipped,
		"tiny":        xzb[:20],
	} {
		_, err := XZUncompressedSize(bytes.NewReader(b), int64(len(b)))
		assert.ErrorIs(t, err, errdefs.ErrInvalidImage, name)
	}
}

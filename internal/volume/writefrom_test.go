//go:build linux

package volume_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/volume"
)

var errCut = errors.New("connection cut")

// cutReader gives the first n bytes of r, then errCut.
type cutReader struct {
	r io.Reader
	n int
}

func (c *cutReader) Read(p []byte) (int, error) {
	if c.n == 0 {
		return 0, errCut
	}
	p = p[:min(len(p), c.n)]
	n, err := c.r.Read(p)
	c.n -= n
	return n, err
}

// writeRunsFrom writes runs with WriteFrom (data in pieces of 3 MiB, so
// that the chunk being filled ends inside most pieces after the first)
// and WriteZeros; every piece is first offered through readers cut off
// before its end, which must take nothing of it.
func writeRunsFrom(t *testing.T, tg *volume.Target, runs []testRun, opts ...volume.WriterOption) *volume.Writer {
	t.Helper()
	w, err := tg.NewWriter(opts...)
	require.NoError(t, err)
	for _, r := range runs {
		if r.data == nil {
			require.NoError(t, w.WriteZeros(int64(r.zeros)))
			continue
		}
		for p := r.data; len(p) > 0; {
			n := min(len(p), 3*mib)
			before := w.Written()
			for _, cut := range []int{n / 3, n - 1} { // in the chunk's part and in the next's
				err := w.WriteFrom(&cutReader{r: bytes.NewReader(p[:n]), n: cut}, int64(n))
				require.ErrorIs(t, err, errCut, "a reader that fails is the caller's error")
				require.Equal(t, before, w.Written(), "nothing of a run whose reader failed is taken")
			}
			require.NoError(t, w.WriteFrom(bytes.NewReader(p[:n]), int64(n)))
			p = p[n:]
		}
	}
	_, err = w.Finish()
	require.NoError(t, err)
	return w
}

// Data read straight into the Writer's chunks lands as written data
// would, on a file and over old data on a device, whether its runs sit
// inside a chunk or straddle two, and a run whose reader fails halfway
// leaves no trace: the retried run lands where it belongs.
func TestWriteFromTakesAllOrNothing(t *testing.T) {
	const size = 21*mib + 4097
	img := makeImage(9, size, 0.4)
	clear(img[4*mib-1000 : 4*mib+3*65536])            // a zero run across a chunk's end
	copy(img[10*mib:17*mib], makeImage(10, 7*mib, 0)) // a data run of three pieces
	whole := blkhash.New(0)
	_, _ = whole.Write(img)
	wantDigest := whole.Sum()
	runs := runsOf(img, 65536)
	requireRunsLand(t, img, wantDigest, runs, writeRunsFrom, nil)
}

// WriteFrom refuses a run past the target's capacity before reading it,
// and more than one chunk at once.
func TestWriteFromPastCapacityOrOverAChunkIsRefused(t *testing.T) {
	ctx := context.Background()
	tg, err := volume.Open(ctx, volume.Options{Path: t.TempDir(), RequestedSize: 4 * mib})
	require.NoError(t, err)
	defer tg.Close()
	w, err := tg.NewWriter()
	require.NoError(t, err)
	r := &cutReader{r: bytes.NewReader(make([]byte, 8*mib)), n: 8 * mib}
	require.ErrorIs(t, w.WriteFrom(r, volume.MaxWriteFrom+1), errdefs.ErrInvalidOptions)
	require.NoError(t, w.WriteFrom(r, 4*mib-512))
	require.ErrorIs(t, w.WriteFrom(r, 1024), errdefs.ErrTargetTooSmall)
	assert.Equal(t, int64(4*mib-512), w.Written())
	assert.Equal(t, 8*mib-(4*mib-512), r.n, "the refused run was not read")
}

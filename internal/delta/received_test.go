package delta_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/delta"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// recorded is a sender's runs (delta.Send's sink) as the Runs a
// ReceivedPass takes, as the upload server's session hands them over:
// each run, then end (io.EOF, with digest; or the session's end).
type recorded struct {
	runs   []recordedRun
	next   int
	end    error
	digest string
}

type recordedRun struct {
	off   int64
	data  []byte
	zeros int64
}

func (r *recorded) Data(off int64, b []byte) error {
	r.runs = append(r.runs, recordedRun{off: off, data: bytes.Clone(b)})
	return nil
}

func (r *recorded) Zero(off, n int64) error {
	r.runs = append(r.runs, recordedRun{off: off, zeros: n})
	return nil
}

func (r *recorded) NextRun(context.Context) (int64, []byte, int64, error) {
	if r.next == len(r.runs) {
		return 0, nil, 0, r.end
	}
	x := r.runs[r.next]
	r.next++
	return x.off, x.data, x.zeros, nil
}

func (r *recorded) Digest() string { return r.digest }

// signed opens path and signs it.
func signed(t *testing.T, path string) (*os.File, *delta.Signature) {
	f, err := os.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	sig, err := delta.Sign(context.Background(), f, volSize)
	require.NoError(t, err)
	return f, sig
}

// TestReceivedPassStepsMakeTheCopy: the runs between a source and its
// changed-since copy, taken by Transfer, then their end with the source's
// digest, Check and Commit leave the copy byte for byte the source, and
// the pass counts the changed blocks and covers the whole volume.
func TestReceivedPassStepsMakeTheCopy(t *testing.T) {
	ctx := context.Background()
	src, dst, changed := changedCopy(t, 5)
	_, base := signed(t, dst)
	sf, sig := signed(t, src)
	runs := &recorded{end: io.EOF, digest: sig.Digest.String()}
	_, err := delta.Send(ctx, sf, sig, delta.Changes(sig, base), 0, runs)
	require.NoError(t, err)
	rp := delta.ReceiveVolume(dst, volSize, delta.SameSize, base.Digest.String(), runs)
	require.NoError(t, rp.Open(ctx))
	defer rp.Close()
	require.NoError(t, rp.Transfer(ctx))
	got, err := rp.Check()
	require.NoError(t, err)
	assert.Equal(t, sig.Digest, got)
	require.NoError(t, rp.Commit())
	p := rp.Pass()
	assert.Equal(t, changed, p.BlocksChanged)
	assert.True(t, p.Received)
	assert.Equal(t, sig.Digest.String(), p.Digest)
	assert.Equal(t, int64(volSize), rp.Compared())
	assert.Equal(t, testimg.Digest(t, src, -1), testimg.Digest(t, dst, -1))
}

// TestReceivedPassAbortedLeavesTheEndsZeroed: runs that end with the
// session's error after a run was applied end Transfer with it, Check refuses a pass with no
// End, and once closed the target's first and last MiB are zeros.
func TestReceivedPassAbortedLeavesTheEndsZeroed(t *testing.T) {
	ctx := context.Background()
	src, dst, _ := changedCopy(t, 6)
	_, base := signed(t, dst)
	sf, sig := signed(t, src)
	cause := errors.New("the session ended")
	changes := delta.Changes(sig, base)
	require.NotEmpty(t, changes)
	runs := &recorded{end: cause}
	_, err := delta.Send(ctx, sf, sig, changes[:1], 0, runs)
	require.NoError(t, err)
	rp := delta.ReceiveVolume(dst, volSize, delta.SameSize, "", runs)
	require.NoError(t, rp.Open(ctx))
	require.ErrorIs(t, rp.Transfer(ctx), cause)
	assert.Equal(t, changes[0].Off+changes[0].Len, rp.Compared(), "the runs applied before the end")
	_, err = rp.Check()
	require.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	rp.Close()
	testimg.AssertZeros(t, dst, 0, 1<<20)
	testimg.AssertZeros(t, dst, volSize-1<<20, 1<<20)
}

// TestReceivedPassOntoNoBase: a target of another size, or not the base
// named, is no base when opened.
func TestReceivedPassOntoNoBase(t *testing.T) {
	_, dst, _ := changedCopy(t, 7)
	for _, rp := range []*delta.ReceivedPass{
		delta.ReceiveVolume(dst, volSize+delta.BlockSize, delta.SameSize, "", &recorded{}),
		delta.ReceiveVolume(dst, volSize, delta.SameSize, "blk-sha256:"+strings.Repeat("0", 64), &recorded{}),
	} {
		require.ErrorIs(t, rp.Open(context.Background()), errdefs.ErrNoDeltaBase)
		rp.Close()
	}
}

// TestAbortedPassOntoALargerDeviceZeroesItsUnalignedEnds: a volume whose
// size is no multiple of the device's sectors, received onto a larger
// device (DevicePrefix) and cut off after its first run, reads zeros in
// its first and last MiB (the held ends: their partial sectors written,
// the rest zeroed by the device), and the device past the volume is as it
// was.
func TestAbortedPassOntoALargerDeviceZeroesItsUnalignedEnds(t *testing.T) {
	ctx := context.Background()
	const size = volSize - 1000 // not a multiple of 512
	src, dst, _ := changedCopy(t, 8)
	require.NoError(t, os.Truncate(src, size))
	old := bytes.Repeat([]byte{0x5A}, volSize+4<<20)
	require.NoError(t, os.WriteFile(dst, old, 0o600))
	dev := testimg.AttachLoop(t, dst)

	df, err := os.Open(dev)
	require.NoError(t, err)
	defer df.Close()
	base, err := delta.Sign(ctx, df, size)
	require.NoError(t, err)
	sf, err := os.Open(src)
	require.NoError(t, err)
	defer sf.Close()
	sig, err := delta.Sign(ctx, sf, size)
	require.NoError(t, err)
	changes := delta.Changes(sig, base)
	require.NotEmpty(t, changes)
	cause := errors.New("the session ended")
	runs := &recorded{end: cause}
	_, err = delta.Send(ctx, sf, sig, changes[:1], 0, runs)
	require.NoError(t, err)

	rp := delta.ReceiveVolume(dev, size, delta.DevicePrefix, "", runs)
	require.NoError(t, rp.Open(ctx))
	require.ErrorIs(t, rp.Transfer(ctx), cause)
	rp.Close()
	testimg.AssertZeros(t, dev, 0, 1<<20)
	testimg.AssertZeros(t, dev, size-1<<20, 1<<20)
	past := make([]byte, int64(len(old))-size)
	_, err = df.ReadAt(past, size)
	require.NoError(t, err)
	assert.Equal(t, old[size:], past, "the device past the volume")
}

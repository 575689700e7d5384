package delta_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/delta"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// receivedSink hands a sender's runs to a ReceivedPass, as the upload
// server's session does.
type receivedSink struct {
	ctx context.Context
	p   *delta.ReceivedPass
}

func (s receivedSink) Data(off int64, b []byte) error { return s.p.Data(s.ctx, off, b) }
func (s receivedSink) Zero(off, n int64) error        { return s.p.Zero(s.ctx, off, n) }

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
// changed-since copy, handed over while Transfer runs, then the End
// digest, Check and Commit leave the copy byte for byte the source, and
// the pass counts the changed blocks and covers the whole volume.
func TestReceivedPassStepsMakeTheCopy(t *testing.T) {
	ctx := context.Background()
	src, dst, changed := changedCopy(t, 5)
	_, base := signed(t, dst)
	sf, sig := signed(t, src)
	rp := delta.ReceiveVolume(dst, volSize, base.Digest.String())
	require.NoError(t, rp.Open(ctx))
	defer rp.Close()
	transferred := make(chan error, 1)
	go func() { transferred <- rp.Transfer(ctx) }()
	<-rp.Ready()

	_, err := delta.Send(ctx, sf, sig, delta.Changes(sig, base), 0, receivedSink{ctx, rp})
	require.NoError(t, err)
	require.NoError(t, rp.End(ctx, sig.Digest))
	require.NoError(t, <-transferred)
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

// TestReceivedPassAbortedLeavesTheEndsZeroed: a pass aborted after a run
// was applied ends Transfer with the cause, Check refuses a pass with no
// End, and once closed the target's first and last MiB are zeros.
func TestReceivedPassAbortedLeavesTheEndsZeroed(t *testing.T) {
	ctx := context.Background()
	src, dst, _ := changedCopy(t, 6)
	_, base := signed(t, dst)
	sf, sig := signed(t, src)
	rp := delta.ReceiveVolume(dst, volSize, "")
	require.NoError(t, rp.Open(ctx))
	transferred := make(chan error, 1)
	go func() { transferred <- rp.Transfer(ctx) }()
	<-rp.Ready()

	runs := delta.Changes(sig, base)
	require.NotEmpty(t, runs)
	_, err := delta.Send(ctx, sf, sig, runs[:1], 0, receivedSink{ctx, rp})
	require.NoError(t, err)
	assert.Equal(t, runs[0].Off+runs[0].Len, rp.Offset(), "the offset a resumed session goes on from")
	cause := errors.New("the session ended")
	rp.Abort(cause)
	require.ErrorIs(t, <-transferred, cause)
	require.ErrorIs(t, rp.Data(ctx, runs[0].Off+runs[0].Len, make([]byte, delta.BlockSize)), errdefs.ErrCancelled, "no run after the pass ended")
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
		delta.ReceiveVolume(dst, volSize+delta.BlockSize, ""),
		delta.ReceiveVolume(dst, volSize, "blk-sha256:"+strings.Repeat("0", 64)),
	} {
		require.ErrorIs(t, rp.Open(context.Background()), errdefs.ErrNoDeltaBase)
		rp.Close()
	}
}

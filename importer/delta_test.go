package importer_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

func TestDeltaCloneRepeatedPassesAndFallbacks(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "src.raw", 8<<20, 41)
	dest := filepath.Join(dir, "dest.img")
	opts := importer.Options{Source: src, Target: dest, Delta: true, Logger: testimg.Logger(t)}

	// No target yet: a full clone.
	res, err := importer.Import(ctx, opts)
	require.NoError(t, err)
	assert.Nil(t, res.Delta, "no base: a full clone")
	sameBytes(t, src, dest, 8<<20)
	first := res.ContentDigest

	// Two blocks changed: a delta pass onto the last pass's base.
	f, err := os.OpenFile(src, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(testimg.RandomBytes(100, 1), 5<<20+10)
	require.NoError(t, err)
	_, err = f.WriteAt(testimg.RandomBytes(100, 2), 128<<10)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	opts.DeltaBase = first
	res, err = importer.Import(ctx, opts)
	require.NoError(t, err)
	require.NotNil(t, res.Delta)
	assert.EqualValues(t, 2, res.Delta.BlocksChanged)
	assert.EqualValues(t, 2*64<<10, res.DataBytes)
	assert.True(t, res.Delta.Final)
	assert.Equal(t, first, res.Delta.BaseDigest)
	assert.NotEqual(t, first, res.ContentDigest)
	sameBytes(t, src, dest, 8<<20)

	// The base named is not the target's (the digest of the first pass
	// again): a full clone, exact.
	res, err = importer.Import(ctx, opts)
	require.NoError(t, err)
	assert.Nil(t, res.Delta)
	sameBytes(t, src, dest, 8<<20)

	// A qcow2 source is converted, never passed as bytes.
	qcow := testimg.Convert(t, src, filepath.Join(dir, "src.qcow2"), "qcow2")
	opts.Source, opts.DeltaBase = qcow, ""
	res, err = importer.Import(ctx, opts)
	require.NoError(t, err)
	assert.Nil(t, res.Delta)
	assert.Equal(t, "qcow2", res.SourceFormat)
	sameBytes(t, src, dest, 8<<20)
}

// deltaEvents records what Options.Events saw: the phases started, in
// order, and the phase after which the source was drained.
type deltaEvents struct {
	started []importer.Phase
	drained []importer.Phase
}

func (e *deltaEvents) observe(ev importer.Event) {
	switch ev.Kind {
	case importer.EventPhaseStarted:
		e.started = append(e.started, ev.Phase)
	case importer.EventSourceDrained:
		e.drained = append(e.drained, ev.Phase)
	}
}

// deltaTargetOf makes src, of size bytes, and an earlier copy of it on
// the target tg; it returns src and the copy's content digest (a base).
func deltaTargetOf(t *testing.T, tg testimg.Target, size int64, seed uint64) (src, base string) {
	src = testimg.Raw(t, t.TempDir(), "src.raw", size, seed)
	testimg.CopyOnto(t, src, tg.Path)
	return src, testimg.ContentDigest(t, tg.Path)
}

// A delta pass is a route of the engine: Info, TransferDelta, Verify,
// Commit and Complete, as Options.Events sees them, the source drained
// after Verify (its second reading ends there), progress that reaches the
// whole source, and the engine's Result.
func TestDeltaPassRunsThroughTheEnginePhases(t *testing.T) {
	const size = 8 << 20
	testimg.ForEachTarget(t, "", size, func(t *testing.T, tg testimg.Target) {
		src, base := deltaTargetOf(t, tg, size, 61)
		// Blocks in both held ends and between them.
		changed := testimg.WriteRandomAt(t, src, 62, 4096, 0, 3<<20+100, size-4096)
		var ev deltaEvents
		var last importer.Progress
		res, err := importer.Import(context.Background(), importer.Options{
			Source: src, Target: tg.Path, Delta: true, DeltaBase: base, Logger: testimg.Logger(t),
			Events: ev.observe, Progress: func(p importer.Progress) { last = p },
		})
		require.NoError(t, err)
		phases := []importer.Phase{importer.PhaseInfo, importer.PhaseTransferDelta, importer.PhaseVerify, importer.PhaseCommit, importer.PhaseComplete}
		assert.Equal(t, phases, ev.started)
		assert.Equal(t, phases, res.Phases)
		assert.Equal(t, []importer.Phase{importer.PhaseVerify}, ev.drained)
		assert.True(t, res.Complete)
		require.NotNil(t, res.Delta)
		assert.Equal(t, changed, res.Delta.BlocksChanged)
		assert.Equal(t, base, res.Delta.BaseDigest)
		assert.True(t, res.Delta.Final)
		assert.True(t, res.Verified)
		assert.Equal(t, testimg.ContentDigest(t, src), res.ContentDigest)
		assert.Equal(t, res.ContentDigest, res.Delta.Digest)
		assert.EqualValues(t, size, res.VirtualSize)
		assert.EqualValues(t, size, res.BytesRead, "the whole source was signed")
		assert.Equal(t, changed*64<<10, res.DataBytes)
		assert.Equal(t, importer.PhaseComplete, last.Phase)
		assert.EqualValues(t, 100, last.Percent)
		assert.Equal(t, testimg.Digest(t, src, -1), testimg.Digest(t, tg.Path, size))
	})
}

// A target that is not the base named, found only once it was signed,
// restarts the import as a full clone, logged once: the target then
// holds the source's bytes exactly.
func TestDeltaBaseMismatchRestartsAsAFullClone(t *testing.T) {
	const size = 8 << 20
	testimg.ForEachTarget(t, "", size, func(t *testing.T, tg testimg.Target) {
		src, base := deltaTargetOf(t, tg, size, 63)
		testimg.WriteRandomAt(t, src, 64, 4096, 1<<20)
		// Someone wrote to the target since: not the base named.
		testimg.WriteRandomAt(t, tg.Path, 65, 4096, 5<<20)
		var ev deltaEvents
		var logs bytes.Buffer
		res, err := importer.Import(context.Background(), importer.Options{
			Source: src, Target: tg.Path, Delta: true, DeltaBase: base, Logger: logTo(t, &logs), Events: ev.observe,
		})
		require.NoError(t, err)
		assert.Equal(t, []importer.Phase{importer.PhaseInfo, importer.PhaseTransferDelta, importer.PhaseError,
			importer.PhaseInfo, importer.PhaseTransferDataFile, importer.PhaseResize, importer.PhaseCommit, importer.PhaseComplete}, ev.started)
		assert.Equal(t, []importer.Phase{importer.PhaseInfo, importer.PhaseTransferDataFile, importer.PhaseResize, importer.PhaseCommit, importer.PhaseComplete}, res.Phases)
		assert.True(t, res.Complete)
		assert.Nil(t, res.Delta, "a full clone")
		assert.Equal(t, 1, strings.Count(logs.String(), "not the delta base; cloning in full"))
		assert.Equal(t, testimg.Digest(t, src, -1), testimg.Digest(t, tg.Path, size))
		assert.Equal(t, testimg.ContentDigest(t, src), res.ContentDigest)
	})
}

// A pass that fails after its first write (a wrong expected digest,
// found in Verify; a pass cut off after its runs) is never Complete: the
// import fails in Error, and the target's first and last MiB stay zeroed,
// so it is no copy anything takes for done, nor the base it was. The next
// pass naming that base clones in full, exactly.
func TestFailedDeltaPassIsNeverComplete(t *testing.T) {
	const size = 8 << 20
	errCut := errors.New("cut off after the runs")
	for _, c := range []struct {
		name string
		opts func(o importer.Options) importer.Options
		want error
	}{
		{"wrong expected digest", func(o importer.Options) importer.Options {
			o.ExpectContentDigest = "blk-sha256:" + strings.Repeat("ab", 32)
			return o
		}, errdefs.ErrChecksumMismatch},
		{"cut after the runs", func(o importer.Options) importer.Options {
			return importer.AfterPhase(o, importer.PhaseTransferDelta, func(context.Context) error { return errCut })
		}, errCut},
	} {
		testimg.ForEachTarget(t, c.name, size, func(t *testing.T, tg testimg.Target) {
			src, base := deltaTargetOf(t, tg, size, 66)
			testimg.WriteRandomAt(t, src, 67, 4096, 2<<20)
			var ev deltaEvents
			opts := importer.Options{Source: src, Target: tg.Path, Delta: true, DeltaBase: base, Logger: testimg.Logger(t), Events: ev.observe}
			res, err := importer.Import(context.Background(), c.opts(opts))
			require.ErrorIs(t, err, c.want)
			assert.False(t, res.Complete)
			assert.Equal(t, importer.PhaseError, res.Phases[len(res.Phases)-1])
			assert.NotContains(t, ev.started, importer.PhaseComplete)
			assert.Nil(t, res.Delta)
			testimg.AssertZeros(t, tg.Path, 0, 1<<20)
			testimg.AssertZeros(t, tg.Path, size-1<<20, 1<<20)
			assert.NotEqual(t, base, testimg.ContentDigest(t, tg.Path))

			res, err = importer.Import(context.Background(), opts)
			require.NoError(t, err)
			assert.Nil(t, res.Delta, "no longer the base named: a full clone")
			assert.Equal(t, testimg.Digest(t, src, -1), testimg.Digest(t, tg.Path, size))
		})
	}
}

// Progress during TransferDelta goes by the bytes both sides were signed
// over, reads the source's bytes signed and writes the data runs: the
// phase's step, once done, waits for the reporter's next report of it.
func TestDeltaPassProgressGoesByTheBytesCompared(t *testing.T) {
	const size = 8 << 20
	tg := testimg.Target{Path: filepath.Join(t.TempDir(), "disk.img")}
	src, _ := deltaTargetOf(t, tg, size, 68)
	changed := testimg.WriteRandomAt(t, src, 69, 4096, 1<<20, 6<<20)
	during := make(chan importer.Progress, 16)
	opts := importer.Options{Source: src, Target: tg.Path, Delta: true, Logger: testimg.Logger(t),
		Progress: func(p importer.Progress) {
			if p.Phase == importer.PhaseTransferDelta {
				select {
				case during <- p:
				default:
				}
			}
		}}
	var seen importer.Progress
	opts = importer.AfterPhase(opts, importer.PhaseTransferDelta, func(context.Context) error {
		// The report at the phase's start says 0; the ticker's next one
		// sees the step done.
		for seen.PhasePercent < 100 {
			select {
			case seen = <-during:
			case <-time.After(30 * time.Second):
				t.Error("no progress report of the done step during TransferDelta")
				return nil
			}
		}
		return nil
	})
	res, err := importer.Import(context.Background(), opts)
	require.NoError(t, err)
	require.NotNil(t, res.Delta)
	assert.EqualValues(t, size, seen.SourceSize)
	assert.EqualValues(t, 100, seen.PhasePercent, "every block of both sides compared")
	assert.Less(t, seen.Percent, 100.0, "100 is Complete's")
	assert.EqualValues(t, size, seen.BytesRead)
	assert.Equal(t, changed*64<<10, seen.BytesWritten)
	assert.Equal(t, testimg.Digest(t, src, -1), testimg.Digest(t, tg.Path, -1))
}

// TestLocalDeltaOntoALargerDeviceLeavesWhatAFullCloneLeaves: a block
// device larger than the source (a volume the storage rounded up) takes a
// local delta pass over its first bytes, as it takes a full clone, and
// then reads exactly as a twin device after a full clone: the source, the
// old bytes past it, and, where the device's last sector held an old GPT
// backup header, its last MiB zeroed, also after a pass that changed no
// block. With ExactSize the device is no base: the clone is refused, the
// device untouched.
func TestLocalDeltaOntoALargerDeviceLeavesWhatAFullCloneLeaves(t *testing.T) {
	const size, devSize = 8 << 20, 16 << 20
	gpt := func(dev string) { testimg.BootableGPT(t, dev, 512) }
	for _, tc := range []struct {
		name    string
		changes int
		prepare func(dev string)
	}{
		{"old bytes past the source", 3, nil},
		{"an old GPT backup header at the device's end", 3, gpt},
		{"an old GPT backup header at the device's end, the source unchanged", 0, gpt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			dev := testimg.LoopDevice(t, dir, devSize)
			if tc.prepare != nil {
				tc.prepare(dev)
			}
			src := testimg.Raw(t, dir, "src.raw", size, 71)
			testimg.CopyOnto(t, src, dev)
			base := testimg.ContentDigest(t, src)
			var changed int64
			if tc.changes > 0 {
				changed = testimg.WriteRandomAt(t, src, 72, 4096, 0, 5<<20+100, size-4096)
			}
			full := testimg.LoopDevice(t, dir, devSize)
			testimg.CopyOnto(t, dev, full)
			require.Equal(t, tc.prepare != nil, testimg.HasBackupGPT(t, dev))
			before := testimg.Digest(t, dev, -1)

			opts := importer.Options{Source: src, Target: dev, Delta: true, DeltaBase: base, Logger: testimg.Logger(t)}
			opts.ExactSize = true
			_, err := importer.Import(context.Background(), opts)
			require.ErrorIs(t, err, errdefs.ErrInvalidOptions, "an exact copy needs a device of the source's size")
			assert.Equal(t, before, testimg.Digest(t, dev, -1), "refused before writing")

			fres, err := importer.Import(context.Background(), importer.Options{Source: src, Target: full, Logger: testimg.Logger(t)})
			require.NoError(t, err)
			opts.ExactSize = false
			res, err := importer.Import(context.Background(), opts)
			require.NoError(t, err)
			require.NotNil(t, res.Delta, "a delta pass onto the larger device")
			assert.Equal(t, changed, res.Delta.BlocksChanged)
			assert.True(t, res.Complete)
			assert.Equal(t, testimg.ContentDigest(t, src), res.ContentDigest)
			assert.EqualValues(t, size, res.VirtualSize)
			assert.EqualValues(t, devSize, fres.TargetSize)
			assert.EqualValues(t, fres.TargetSize, res.TargetSize, "the device's size, as the full clone reports it")

			assert.Equal(t, testimg.Digest(t, src, -1), testimg.Digest(t, dev, size), "the device starts with the source")
			assert.Equal(t, testimg.Digest(t, full, -1), testimg.Digest(t, dev, -1), "the device reads as after a full clone")
			if tc.prepare != nil {
				assert.False(t, testimg.HasBackupGPT(t, dev))
				testimg.AssertZeros(t, dev, devSize-1<<20, 1<<20)
			}
		})
	}
}

package importer_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// sliceRuns hands out a disk's runs, as a program that receives a clone
// would: data and zero counts, then its digest.
type sliceRuns struct {
	runs   []run
	digest string
	off    int64
}

type run struct {
	data  []byte
	zeros int64
	at    int64 // when set, the run claims this offset instead
}

func (s *sliceRuns) NextRun(context.Context) (int64, []byte, int64, error) {
	if len(s.runs) == 0 {
		return 0, nil, 0, io.EOF
	}
	r := s.runs[0]
	s.runs = s.runs[1:]
	off := s.off
	if r.at != 0 {
		off = r.at
	}
	s.off += int64(len(r.data)) + r.zeros
	return off, r.data, r.zeros, nil
}

func (s *sliceRuns) Digest() string { return s.digest }

// runsOfFile cuts the file at path into runs, every 64 KiB block of zeros
// a zero run.
func runsOfFile(t *testing.T, path string) []run {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var runs []run
	for off := 0; off < len(b); off += 64 << 10 {
		blk := b[off:min(off+64<<10, len(b))]
		zero := true
		for _, c := range blk {
			if c != 0 {
				zero = false
				break
			}
		}
		switch last := len(runs) - 1; {
		case zero && last >= 0 && runs[last].zeros > 0:
			runs[last].zeros += int64(len(blk))
		case zero:
			runs = append(runs, run{zeros: int64(len(blk))})
		default:
			runs = append(runs, run{data: blk})
		}
	}
	return runs
}

// A disk given as runs (datasource.NewRuns, through CustomSource) lands
// as its bytes would, on a file and on a device, its zero runs never
// written as data, and is verified against the sender's digest.
func TestImportOfRunsLandsAsTheBytesWould(t *testing.T) {
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "src.raw", 6<<20, 41)
	require.NoError(t, os.Truncate(src, 24<<20))
	digest := testimg.ContentDigest(t, src)
	targets := map[string]string{"file": filepath.Join(dir, "out.img")}
	if dev := testimg.LoopDeviceIfRoot(t, dir, 32<<20); dev != "" {
		targets["device"] = dev
	}
	for name, target := range targets {
		t.Run(name, func(t *testing.T) {
			runs := &sliceRuns{runs: runsOfFile(t, src), digest: digest}
			res, err := importer.Import(context.Background(), importer.Options{
				CustomSource: datasource.NewRuns("the clone", runs, 24<<20), Target: target,
				TargetOptions: importer.TargetOptions{ContentType: importer.ContentTypeAsIs}, Logger: testimg.Logger(t),
			})
			require.NoError(t, err)
			assert.True(t, res.Complete)
			assert.Equal(t, digest, res.ContentDigest)
			assert.True(t, res.Verified)
			assert.Equal(t, int64(24<<20), res.BytesWritten)
			assert.LessOrEqual(t, res.DataBytes, int64(7<<20), "the zero runs are not data written")
			assert.Equal(t, testimg.Digest(t, src, 24<<20), testimg.Digest(t, target, 24<<20))
		})
	}
}

// Runs that do not add up are refused, nothing committed: another digest
// (ErrVerifyMismatch), a gap, fewer bytes than the size declared.
func TestImportOfRunsThatDoNotAddUpFails(t *testing.T) {
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "src.raw", 4<<20, 43)
	digest := testimg.ContentDigest(t, src)
	other := testimg.ContentDigest(t, testimg.Raw(t, dir, "other.raw", 4<<20, 44))
	for _, tc := range []struct {
		name   string
		runs   func() *sliceRuns
		size   int64
		reason error
	}{
		{"another digest", func() *sliceRuns { return &sliceRuns{runs: runsOfFile(t, src), digest: other} }, 4 << 20, errdefs.ErrVerifyMismatch},
		{"a malformed digest", func() *sliceRuns { return &sliceRuns{runs: runsOfFile(t, src), digest: "blk-sha256:zz"} }, 4 << 20, errdefs.ErrInvalidImage},
		{"a gap", func() *sliceRuns {
			r := runsOfFile(t, src)
			r[1].at = 3 << 20
			return &sliceRuns{runs: r, digest: digest}
		}, 4 << 20, errdefs.ErrInvalidImage},
		{"short of its size", func() *sliceRuns {
			r := runsOfFile(t, src)
			return &sliceRuns{runs: r[:len(r)-1], digest: digest}
		}, 4 << 20, errdefs.ErrInvalidImage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := filepath.Join(t.TempDir(), "out.img")
			res, err := importer.Import(context.Background(), importer.Options{
				CustomSource: datasource.NewRuns("the clone", tc.runs(), tc.size), Target: target,
				TargetOptions: importer.TargetOptions{ContentType: importer.ContentTypeAsIs}, Logger: testimg.Logger(t),
			})
			require.ErrorIs(t, err, tc.reason)
			t.Log(err)
			assert.False(t, res.Complete)
			assert.NoFileExists(t, target)
		})
	}
}

package importer

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/internal/iostage"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// Info reads over ranges only what decide will read: the probe where
// nothing else closes the ranged route, and a qcow2's tables only where
// the stream decoder is open too. Each case counts the range requests the
// server received while the facts were gathered.
func TestGatherFactsReadsRangesOnlyWhereTheRouteDependsOnThem(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 8<<20, 5)
	testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2")
	base, ranges := testimg.ServeCountingRanges(t, dir)
	sum, err := iostage.ParseChecksum(testimg.FileDigest(t, filepath.Join(dir, "disk.qcow2")))
	require.NoError(t, err)

	for _, c := range []struct {
		name         string
		file         string
		req          request
		probed       bool
		layout       bool
		rangeQueries func(n int64) bool
		route        routeKind
	}{
		{"qcow2: probe and tables", "disk.qcow2", request{}, true, true, func(n int64) bool { return n >= 3 }, routeStreamDecode},
		{"qcow2 with a checksum: nothing", "disk.qcow2", request{Checksums: []iostage.Checksum{sum}}, false, false, func(n int64) bool { return n == 0 }, routeStreamDecode},
		{"qcow2 with ranged reads off: nothing", "disk.qcow2", request{TargetOptions: TargetOptions{NoRangedRead: true}}, false, false, func(n int64) bool { return n == 0 }, routeStreamDecode},
		{"qcow2 without the stream decoder: the probe", "disk.qcow2", request{TargetOptions: TargetOptions{NoStreamDecode: true}}, true, false, func(n int64) bool { return n == 1 }, routeRanged},
		{"raw: nothing", "disk.raw", request{}, false, false, func(n int64) bool { return n == 0 }, routeStream},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, err := datasource.NewHTTP(base+c.file, datasource.Config{})
			require.NoError(t, err)
			req := c.req
			req.Source = src
			req.Logger = slog.New(slog.DiscardHandler)
			a := newAttempt(req)
			defer a.cleanup()
			ctx := context.Background()
			_, err = a.openSource(ctx)
			require.NoError(t, err)
			require.NotNil(t, a.caps.Ranges, "the file server serves ranges")
			before := ranges.Load()
			f := a.gatherFacts(ctx, a.sourceFacts())
			n := ranges.Load() - before
			assert.True(t, c.rangeQueries(n), "%d range requests", n)
			assert.Equal(t, c.probed, f.rangesProbed)
			assert.NoError(t, f.rangeReadErr)
			assert.Equal(t, c.layout, f.layout != nil, "layout error: %v", f.layoutErr)
			plan, why := decide(f, req)
			assert.Equal(t, c.route.String(), plan.Route.String(), why)
		})
	}
}

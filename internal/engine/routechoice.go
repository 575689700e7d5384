package engine

import (
	"context"
	"errors"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/format"
	"github.com/diskimport/engine/internal/streamdecode"
	"github.com/diskimport/engine/internal/volume"
)

// Choosing between the ranged route and the stream decoder for an HTTP
// image both can take (a qcow2 onto a raw target, no checksum, no Verify,
// a server that serves ranges).
//
// Measured (bench/routes.sh, 2 GiB disk with 35 % data, HTTP from
// 127.0.0.1, 3 interleaved runs, medians; see rangedWins for the numbers)
// the stream decoder is the faster route for every image whose file is
// mostly referenced data: both read the same bytes, and one GET streamed
// into our decoder beats qemu-img asking our NBD export for each run of
// clusters, and much more so for compressed clusters, which qemu-img
// fetches one small range at a time while the decoder inflates them on
// every core.
//
// Ranged stays the better route where it reads much less than a stream
// would (a file holding mostly bytes no table references: discarded
// clusters of a used image, or a file cut from a larger object) and where
// the decoder would fail: data before the tables that map it, more than
// the decoder may hold (streamdecode.Options.MaxBuffered). A decoder that
// meets such a layout mid-stream aborts and the import starts over
// (restart.go): that costs the bytes already read. Ranged never needs
// scratch, so when the tables say the decoder would have to hold too much,
// ranged is chosen up front.
//
// Both facts come from the L1 and L2 tables, read over ranges before
// choosing (readQCOW2Layout): one small request for the L1 and one per L2
// table, a few in flight; the ranged route would read them anyway, and
// they are 1/8192 of the virtual size at 64 KiB clusters. Past
// maxLayoutTableBytes of tables the stream decoder is chosen without
// looking (a restart, now onto ranges, remains the safety net).

// rangedWins: the stream must carry this many times the bytes the ranged
// route reads before ranged is the faster route.
const rangedWins = 2

// preferRanged says whether an image the stream decoder could take goes
// over ranges instead, and why.
func (a *attempt) preferRanged(ctx context.Context, st *datasource.Transfer, img *format.Image) (bool, string) {
	if a.target == nil || a.target.Kind() == volume.Block {
		// Inspect has no target and plans as for a device.
		return true, "onto a block device qemu-img through our NBD export measured faster than the stream decoder"
	}
	if img.Format != format.QCOW2 {
		// vmdk streamOptimized never takes ranges (streamOptimized); other
		// formats the decoder may learn are unmeasured: ranged, as before.
		return true, "format not measured against the stream decoder"
	}
	rr, err := datasource.Ranges(st).Open(ctx)
	if err != nil {
		return true, "opening the range reader: " + err.Error()
	}
	defer rr.Close()
	lay, err := readQCOW2Layout(ctx, countReaderAt(rr, &a.meter.rangedRead), img.Header, rr.Size())
	switch {
	case errors.Is(err, errLayoutTooBig):
		return false, ""
	case err != nil:
		// Ranged: its structural check names what is wrong before qemu-img
		// runs; a read failure would hit either route.
		return true, "reading the qcow2 tables: " + err.Error()
	}
	maxHeld := a.req.StreamDecodeMaxBuffered
	if maxHeld <= 0 {
		maxHeld = streamdecode.DefaultMaxBuffered
	}
	a.log.Debug("qcow2 layout", "fileSize", rr.Size(), "referenced", lay.referenced, "early", lay.early,
		"compressed", lay.compressed, "l2Tables", lay.l2Tables)
	return rangedBetter(lay, rr.Size(), maxHeld)
}

// rangedBetter is the rule on a qcow2 of size bytes with layout lay, for a
// decoder that may hold maxHeld bytes.
func rangedBetter(lay qcow2Layout, size, maxHeld int64) (bool, string) {
	switch {
	case lay.early > maxHeld:
		return true, "data lies before the tables that map it: a stream decoder would have to hold too much of it"
	case size > rangedWins*lay.referenced:
		return true, "the file is mostly bytes the image does not reference; ranges read only the rest"
	}
	return false, ""
}

package engine

import (
	"context"
	"errors"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/format"
	"github.com/diskimport/engine/internal/iostage"
	"github.com/diskimport/engine/internal/streamdecode"
)

// Choosing between the ranged route and the stream decoder for an HTTP
// qcow2 both can take (onto a raw target, no checksum, no Verify, no
// internal snapshots, a server that serves ranges; useStreamDecode is the
// gate).
//
// Measured with bench/routes.sh (2 GiB disk, 35 % data: a 752 MB qcow2,
// and 392 MB with compressed clusters; HTTP from 127.0.0.1; 3 interleaved
// runs on a loaded 2-core machine; medians in seconds, ranged with the
// read-ahead and -m 16 of this change):
//
//	                   decode  ranged  curl + qemu-img convert -W
//	qcow2    → file     0.84    1.19    2.43
//	qcow2    → loop     6.71    2.02    1.95
//	c.qcow2  → file     3.98    3.50    4.51
//	c.qcow2  → loop     6.53    4.64    3.12
//
//	vhdx     → file     0.86    1.21    1.89
//	vhdx     → loop     0.94    1.62    2.03
//
// A vhdx is decoded onto either target: its decoder writes whole blocks.
// So are a dynamic vhd and a vdi, whose tables come first: the same
// bench/routes.sh, a 1 GiB disk (35 % data), 3 interleaved runs at load
// 20, medians in seconds (the decoder won 11 of the 12 paired runs):
//
//	                   decode  ranged  curl + qemu-img convert -W
//	vhd      → file     2.23    2.53    3.20
//	vhd      → loop     1.78    2.37    3.74
//	vdi      → file     2.59    3.27    5.23
//	vdi      → loop     1.39    2.38    3.72
// A qcow2 mostly of plain clusters is decoded onto either target: one GET
// into the decoder beats qemu-img reading our NBD export. Onto a block
// device that holds since the decoder's writes are gathered into 4 MiB
// requests, four in flight (volume.BatchedDeviceWriter); before, one 64 KiB cluster
// at a time through the DeviceWriter lost to qemu-img's 16 overlapping
// 2 MiB writes (the loop row above). Re-measured after that change, same
// disk, 4 interleaved runs, medians in seconds onto a direct-io loop
// device:
//
//	                   decode  decode before  ranged
//	qcow2    → loop     0.98       2.48        1.30
//	c.qcow2  → loop     2.60       4.23        2.55
//
// Mostly compressed clusters go over ranges onto either target: qemu-img
// inflates them at least as fast as the decoder here.
//
// Ranged is also chosen where it reads much less than a stream would (a
// file at least rangedWins times what its tables reference: discarded
// clusters of a used image, a file cut from a larger object) and where
// the decoder would have to hold more than it may of clusters that come
// before their tables (streamdecode.Options.MaxBuffered): past that it
// spills them to scratch, or, where it cannot follow the layout, the
// attempt aborts and starts over (importWithRestarts), costing the bytes already
// read. Ranged never needs scratch nor a restart, so it is chosen up front
// when the tables predict either.
//
// The facts come from the L1 and L2 tables, read over ranges before
// choosing (format.ReadQCOW2Layout): one small request for the L1 and one per L2
// table, a few in flight (5 ms for the bench image); they are 1/8192 of
// the virtual size at 64 KiB clusters. Tables beyond maxLayoutTableBytes,
// or that cannot be read, mean ranged (whose structural check names what
// is wrong before qemu-img runs).

// maxLayoutTableBytes bounds the tables read before the route is chosen:
// 16 MiB of L2 tables cover 1 TiB of a fully allocated disk at 64 KiB
// clusters.
const maxLayoutTableBytes = 16 << 20

// rangedWins: the stream must carry this many times the bytes the ranged
// route reads before ranged is the faster route.
const rangedWins = 2

// preferRanged says whether an image the stream decoder could take goes
// over ranges instead, and why.
func (a *attempt) preferRanged(ctx context.Context, st *datasource.Transfer, img *format.Image) (bool, string) {
	switch img.Format {
	case format.VHDX, format.VHD, format.VDI:
		// Their decoders write whole blocks: faster onto files and devices.
		return false, ""
	case format.QCOW2:
	default:
		// A streamOptimized vmdk never takes ranges (streamOptimized).
		return true, "format not measured against the stream decoder"
	}
	rr, err := st.Ranges.Open(ctx)
	if err != nil {
		return true, "opening the range reader: " + err.Error()
	}
	defer rr.Close()
	lay, err := format.ReadQCOW2Layout(ctx, iostage.CountReaderAt(rr, &a.meter.rangedRead), img.Header, rr.Size(), maxLayoutTableBytes)
	switch {
	case errors.Is(err, errdefs.ErrTablesTooLarge):
		return true, "tables too large to read up front; ranges never need a restart"
	case err != nil:
		// Ranged: its structural check names what is wrong before qemu-img
		// runs; a read failure would hit either route.
		return true, "reading the qcow2 tables: " + err.Error()
	}
	maxHeld := a.req.StreamDecodeMaxBuffered
	if maxHeld <= 0 {
		maxHeld = streamdecode.DefaultMaxBuffered
	}
	a.log.Debug("qcow2 layout", "fileSize", rr.Size(), "referenced", lay.Referenced, "early", lay.Early,
		"clusters", lay.Clusters, "compressed", lay.Compressed, "l2Tables", lay.L2Tables)
	return rangedBetter(lay, rr.Size(), maxHeld)
}

// rangedBetter is the rule on a qcow2 of size bytes with layout lay, for a
// decoder that may hold maxHeld bytes.
func rangedBetter(lay format.QCOW2Layout, size, maxHeld int64) (bool, string) {
	switch {
	case 2*lay.Compressed >= lay.Clusters && lay.Compressed > 0:
		return true, "mostly compressed clusters, which qemu-img inflates faster than the stream decoder (measured)"
	case lay.Early > maxHeld:
		return true, "data lies before the tables that map it: a stream decoder would have to hold too much of it"
	case size > rangedWins*lay.Referenced:
		return true, "the file is mostly bytes the image does not reference; ranges read only the rest"
	}
	return false, ""
}

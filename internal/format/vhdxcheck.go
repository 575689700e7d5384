package format

import (
	"encoding/binary"
	"fmt"
	"io"
)

// vhdxRegionAlign: every region starts and ends on a MiB boundary past the
// first MiB.
const vhdxRegionAlign = 1 << 20

// CheckVHDX checks the region tables of a VHDX of size bytes: a valid
// copy ("regi" signature, CRC-32C, fewer than 2048 entries), whose BAT and
// metadata regions are present, aligned and inside the file, as
// OpenStack's format inspector requires. qemu-img already refuses a VHDX
// whose BAT points past the end of the file, so payload blocks are its job.
func CheckVHDX(r io.ReaderAt, size int64) error {
	if size < VHDXRegionTable2+VHDXRegionTableLen {
		return invalidf(VHDX, "file of %d bytes ends before its region tables (truncated image?)", size)
	}
	var firstErr error
	for _, off := range []int64{VHDXRegionTable1, VHDXRegionTable2} {
		meta, err := checkVHDXRegionTable(r, off, size)
		if err == nil {
			// qemu uses the first valid copy.
			return checkVHDXMetadata(r, meta)
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// checkVHDXRegionTable checks the region table at off and returns the
// offset of the metadata region.
func checkVHDXRegionTable(r io.ReaderAt, off, size int64) (int64, error) {
	t := make([]byte, VHDXRegionTableLen)
	if _, err := r.ReadAt(t, off); err != nil {
		return 0, fmt.Errorf("vhdx: reading the region table at %d: %w", off, readFailure(err))
	}
	regions, n, err := ParseVHDXRegionTable(t, off)
	if err != nil {
		return 0, err
	}
	if n > VHDXMaxEntries {
		return 0, unsafef(VHDX, "region table at %d has %d entries, more than %d", off, n, VHDXMaxEntries)
	}
	var bat bool
	meta := int64(-1)
	for i, e := range regions {
		start, length := e.Start, e.Length
		if start%vhdxRegionAlign != 0 || length%vhdxRegionAlign != 0 || start < vhdxRegionAlign {
			return 0, invalidf(VHDX, "region %d at %d (+%d) is not aligned to 1 MiB", i, start, length)
		}
		if start > uint64(size) || length > uint64(size)-start {
			return 0, invalidf(VHDX, "region %d at %d..%d lies past the end of the %d-byte file (truncated image?)", i, start, start+length, size)
		}
		bat = bat || e.GUID == VHDXBATRegion
		if e.GUID == VHDXMetadataRegion {
			meta = int64(start)
		}
	}
	if !bat || meta < 0 {
		return 0, invalidf(VHDX, "region table at %d lacks the BAT or the metadata region", off)
	}
	return meta, nil
}

// checkVHDXMetadata refuses a differencing VHDX (File Parameters with
// HasParent): it reads its parent from elsewhere, which qemu-img can only
// fail on with "Operation not supported".
func checkVHDXMetadata(r io.ReaderAt, off int64) error {
	t := make([]byte, VHDXMetadataTableLen)
	if _, err := r.ReadAt(t, off); err != nil {
		return fmt.Errorf("vhdx: reading the metadata table at %d: %w", off, readFailure(err))
	}
	entries, n, ok := ParseVHDXMetadataTable(t)
	if !ok {
		return invalidf(VHDX, "metadata table at %d has no \"metadata\" signature", off)
	}
	if n > VHDXMaxEntries {
		return unsafef(VHDX, "metadata table has %d entries, more than %d", n, VHDXMaxEntries)
	}
	for _, e := range entries {
		if e.GUID != VHDXFileParameters {
			continue
		}
		var params [8]byte
		if _, err := r.ReadAt(params[:], off+int64(e.Offset)); err != nil {
			return fmt.Errorf("vhdx: reading the file parameters: %w", readFailure(err))
		}
		if binary.LittleEndian.Uint32(params[4:])&VHDXHasParent != 0 {
			return unsafef(VHDX, "differencing disk refers to a parent image")
		}
		return nil
	}
	return invalidf(VHDX, "metadata table lacks the file parameters")
}

package format

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
)

// qcow2 header layout (big endian), from the qcow2 specification.
const (
	qcow2V2HeaderLen = 72
	qcow2V3HeaderLen = 104

	qcow2IncompatDirty      = 1 << 0
	qcow2IncompatCorrupt    = 1 << 1
	qcow2IncompatDataFile   = 1 << 2
	qcow2IncompatCompType   = 1 << 3
	qcow2IncompatExtendedL2 = 1 << 4
	qcow2IncompatKnown      = qcow2IncompatDirty | qcow2IncompatCorrupt | qcow2IncompatDataFile | qcow2IncompatCompType | qcow2IncompatExtendedL2

	qcow2ExtEnd      = 0x00000000
	qcow2ExtDataFile = 0x44415441

	// Limits qemu itself enforces (block/qcow2.h), so anything beyond them
	// is corrupt or hostile.
	qcow2MinClusterBits   = 9
	qcow2MaxClusterBits   = 21
	qcow2MaxL1Bytes       = 32 << 20
	qcow2MaxReftableBytes = 8 << 20
	qcow2MaxSnapshots     = 65536
)

func parseQCOW2Header(head []byte) (Header, error) {
	const f = QCOW2
	be := binary.BigEndian
	if err := needHead(f, head, qcow2V2HeaderLen, "header"); err != nil {
		return Header{}, err
	}
	if !bytes.HasPrefix(head, magicQCOW2) {
		return Header{}, invalidf(f, "bad magic")
	}
	h := Header{Format: f, Compressed: "zlib"}
	h.QCOW2Version = be.Uint32(head[4:])
	if h.QCOW2Version != 2 && h.QCOW2Version != 3 {
		return Header{}, unsupportedf(f, "version %d", h.QCOW2Version)
	}
	backingOff := be.Uint64(head[8:])
	if backingOff != 0 {
		return Header{}, unsafef(f, "image has a backing file %s (flatten it first: qemu-img convert -O qcow2 IMAGE FLAT.qcow2)",
			qcow2BackingName(head, backingOff, be.Uint32(head[16:])))
	}
	h.ClusterBits = be.Uint32(head[20:])
	if h.ClusterBits < qcow2MinClusterBits || h.ClusterBits > qcow2MaxClusterBits {
		return Header{}, unsafef(f, "cluster_bits %d outside %d..%d", h.ClusterBits, qcow2MinClusterBits, qcow2MaxClusterBits)
	}
	clusterSize := uint64(1) << h.ClusterBits
	size := be.Uint64(head[24:])
	if size > 1<<62 {
		return Header{}, unsafef(f, "virtual size %d is absurd", size)
	}
	h.VirtualSize = int64(size)
	if crypt := be.Uint32(head[32:]); crypt != 0 {
		return Header{}, unsupportedf(f, "encrypted image (crypt_method %d)", crypt)
	}
	h.L1Size = be.Uint32(head[36:])
	h.L1TableOffset = be.Uint64(head[40:])
	h.RefcountOffset = be.Uint64(head[48:])
	h.RefcountClusters = be.Uint32(head[56:])
	nbSnapshots := be.Uint32(head[60:])
	snapshotsOff := be.Uint64(head[64:])
	h.RefcountOrder = 4

	headerLen := uint32(qcow2V2HeaderLen)
	if h.QCOW2Version == 3 {
		if err := needHead(f, head, qcow2V3HeaderLen, "version 3 header"); err != nil {
			return Header{}, err
		}
		incompat := be.Uint64(head[72:])
		if incompat&qcow2IncompatDataFile != 0 {
			return Header{}, unsafef(f, "image uses an external data file")
		}
		if incompat&qcow2IncompatCorrupt != 0 {
			return Header{}, invalidf(f, "image is marked corrupt")
		}
		if unknown := incompat &^ qcow2IncompatKnown; unknown != 0 {
			return Header{}, unsupportedf(f, "unknown incompatible features %#x", unknown)
		}
		h.ExtendedL2 = incompat&qcow2IncompatExtendedL2 != 0
		h.RefcountOrder = be.Uint32(head[96:])
		if h.RefcountOrder > 6 {
			return Header{}, invalidf(f, "refcount_order %d > 6", h.RefcountOrder)
		}
		headerLen = be.Uint32(head[100:])
		if headerLen < qcow2V3HeaderLen || headerLen%8 != 0 || uint64(headerLen) > clusterSize {
			return Header{}, invalidf(f, "header_length %d", headerLen)
		}
		if headerLen > qcow2V3HeaderLen {
			if err := needHead(f, head, qcow2V3HeaderLen+1, "compression type"); err != nil {
				return Header{}, err
			}
			switch ct := head[104]; ct {
			case 0:
			case 1:
				h.Compressed = "zstd"
			default:
				return Header{}, unsupportedf(f, "compression type %d", ct)
			}
		}
		if incompat&qcow2IncompatCompType != 0 && h.Compressed == "zlib" && headerLen <= qcow2V3HeaderLen {
			return Header{}, invalidf(f, "compression type feature set without a compression type field")
		}
	}

	// Header extensions follow the header and end with an end marker; they
	// sit in the first cluster.
	if err := checkQCOW2Extensions(head, uint64(headerLen), clusterSize); err != nil {
		return Header{}, err
	}

	if h.L1TableOffset%clusterSize != 0 {
		return Header{}, invalidf(f, "L1 table offset %#x not cluster aligned", h.L1TableOffset)
	}
	if h.RefcountOffset%clusterSize != 0 || h.RefcountOffset == 0 {
		return Header{}, invalidf(f, "refcount table offset %#x not cluster aligned", h.RefcountOffset)
	}
	if uint64(h.RefcountClusters)*clusterSize > qcow2MaxReftableBytes || h.RefcountClusters == 0 {
		return Header{}, unsafef(f, "refcount table of %d clusters", h.RefcountClusters)
	}
	if uint64(h.L1Size)*8 > qcow2MaxL1Bytes {
		return Header{}, unsafef(f, "L1 table of %d entries exceeds qemu's limit", h.L1Size)
	}
	need := qcow2L1Needed(size, h.ClusterBits, h.ExtendedL2)
	if uint64(h.L1Size) < need {
		return Header{}, invalidf(f, "L1 table of %d entries is too small for virtual size %d (needs %d)", h.L1Size, size, need)
	}
	if uint64(h.L1Size) > need {
		return Header{}, unsafef(f, "L1 table of %d entries is larger than virtual size %d needs (%d)", h.L1Size, size, need)
	}
	if nbSnapshots > qcow2MaxSnapshots {
		return Header{}, unsafef(f, "%d snapshots", nbSnapshots)
	}
	if nbSnapshots > 0 && snapshotsOff%clusterSize != 0 {
		return Header{}, invalidf(f, "snapshot table offset %#x not cluster aligned", snapshotsOff)
	}
	h.Snapshots = nbSnapshots
	return h, nil
}

// qcow2L2Entries is the number of entries in one L2 table.
func qcow2L2Entries(clusterBits uint32, extendedL2 bool) uint64 {
	if extendedL2 {
		return (uint64(1) << clusterBits) / 16
	}
	return (uint64(1) << clusterBits) / 8
}

// qcow2L1Needed is the number of L1 entries a virtual size needs.
func qcow2L1Needed(size uint64, clusterBits uint32, extendedL2 bool) uint64 {
	perL1 := qcow2L2Entries(clusterBits, extendedL2) << clusterBits
	return (size + perL1 - 1) / perL1
}

// checkQCOW2Extensions walks the header extensions and refuses the external
// data file extension, which qemu would open even without the feature bit.
func checkQCOW2Extensions(head []byte, off, clusterSize uint64) error {
	const f = QCOW2
	be := binary.BigEndian
	for {
		if off+8 > clusterSize {
			// qemu stops at the end of the first cluster as well.
			return nil
		}
		if off+8 > uint64(len(head)) {
			return invalidf(f, "truncated header extensions at offset %d (head has %d bytes)", off, len(head))
		}
		typ := be.Uint32(head[off:])
		length := uint64(be.Uint32(head[off+4:]))
		if typ == qcow2ExtEnd {
			return nil
		}
		if typ == qcow2ExtDataFile {
			return unsafef(f, "image names an external data file")
		}
		next := off + 8 + (length+7)&^7
		if next > clusterSize {
			return invalidf(f, "header extension %#x of %d bytes runs past the first cluster", typ, length)
		}
		off = next
	}
}

// qcow2BackingName is the backing file's path as the header names it,
// quoted; the offset when the name lies beyond the bytes read.
func qcow2BackingName(head []byte, off uint64, size uint32) string {
	if size == 0 || size > 1023 || off > uint64(len(head)) || uint64(len(head))-off < uint64(size) {
		return fmt.Sprintf("(backing_file_offset %#x)", off)
	}
	return strconv.Quote(string(head[off : off+uint64(size)]))
}

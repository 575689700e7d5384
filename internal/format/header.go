package format

import (
	"fmt"
	"strings"

	"github.com/diskimport/engine/errdefs"
)

// DefaultMaxVirtualSize is the largest virtual disk ParseHeader accepts
// unless told otherwise: 64 TiB, far above any VM disk we expect, far below
// what a hostile header can claim.
const DefaultMaxVirtualSize int64 = 64 << 40

// Header is what the first bytes of an image tell.
type Header struct {
	Format Format
	// VirtualSize is the disk size in bytes the header announces, -1 when
	// the header does not tell (raw, iso, vhdx).
	VirtualSize int64

	// QCOW2 only.
	QCOW2Version     uint32
	ClusterBits      uint32 // log2 of the cluster size
	L1Size           uint32 // entries in the L1 table
	L1TableOffset    uint64
	RefcountOffset   uint64 // refcount table
	RefcountClusters uint32
	RefcountOrder    uint32 // log2 of refcount bits
	ExtendedL2       bool   // 128-bit L2 entries (subclusters)
	Compressed       string // qcow2 cluster compression: "zlib" or "zstd"
	Snapshots        uint32 // internal snapshots (their table is checked by qemu-img check)

	// VMDK only.
	VMDKCreateType string // from the embedded descriptor
	GrainSize      int64  // bytes

	// VHD only: 2 fixed, 3 dynamic.
	VHDDiskType uint32
	// VDI only: 1 dynamic, 2 fixed.
	VDIImageType uint32
	// VDI only: where the block map and the blocks start, the size of a
	// block and the number of block-map entries.
	VDIBlockMapOffset, VDIDataOffset uint32
	VDIBlockSize, VDIBlocks          uint32
}

// Describe names format f with the subtype, from its header h, that
// decides how it is read: a vmdk's create type ("monolithicSparse vmdk"), a
// vhd's disk type, a vdi's image type.
func Describe(f Format, h Header) string {
	name := string(f)
	switch f {
	case VMDK:
		if t := strings.TrimSpace(h.VMDKCreateType); t != "" {
			name = t + " " + name
		}
	case VHD:
		name = fmt.Sprintf("%s (disk type %d)", name, h.VHDDiskType)
	case VDI:
		name = fmt.Sprintf("%s (image type %d)", name, h.VDIImageType)
	}
	return name
}

// ParseHeader validates what can be validated from the first bytes of an
// image of format f (as reported by Sniff) and extracts its virtual size,
// refusing virtual sizes over DefaultMaxVirtualSize.
func ParseHeader(f Format, head []byte) (Header, error) {
	return ParseHeaderMax(f, head, DefaultMaxVirtualSize)
}

// ParseHeaderMax is ParseHeader with a caller-chosen virtual size limit
// (<= 0 means DefaultMaxVirtualSize).
func ParseHeaderMax(f Format, head []byte, maxVirtualSize int64) (Header, error) {
	if maxVirtualSize <= 0 {
		maxVirtualSize = DefaultMaxVirtualSize
	}
	var (
		h   Header
		err error
	)
	switch f {
	case Raw, ISO:
		h = Header{Format: f, VirtualSize: -1}
	case QCOW2:
		h, err = parseQCOW2Header(head)
	case VMDK:
		h, err = parseVMDKHeader(head)
	case VMDKDescriptor:
		return Header{}, fmt.Errorf("vmdk: text descriptor names external extent files, refusing it: %w", errdefs.ErrUnsafeImage)
	case VHD:
		h, err = parseVHDHeader(head)
	case VHDX:
		h, err = parseVHDXHeader(head)
	case VDI:
		h, err = parseVDIHeader(head)
	case QCOW1, QED, Parallels, Bochs, Cloop, DMG, LUKS, VMDKSESparse, VMDKCOWD:
		return Header{}, errInvalidFormat(f)
	default:
		return Header{}, fmt.Errorf("format %q: %w", f, errdefs.ErrUnsupportedFormat)
	}
	if err != nil {
		return Header{}, err
	}
	if h.VirtualSize > maxVirtualSize {
		return Header{}, fmt.Errorf("%s: virtual size %d exceeds the limit %d: %w", f, h.VirtualSize, maxVirtualSize, errdefs.ErrUnsafeImage)
	}
	return h, nil
}

// needHead fails cleanly when head is too short for a structure.
func needHead(f Format, head []byte, n int, what string) error {
	if len(head) < n {
		return fmt.Errorf("%s: truncated %s: need %d bytes, have %d: %w", f, what, n, len(head), errdefs.ErrInvalidImage)
	}
	return nil
}

func invalidf(f Format, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", f, fmt.Sprintf(format, args...), errdefs.ErrInvalidImage)
}

func unsafef(f Format, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", f, fmt.Sprintf(format, args...), errdefs.ErrUnsafeImage)
}

func unsupportedf(f Format, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", f, fmt.Sprintf(format, args...), errdefs.ErrUnsupportedFormat)
}

package format

import "encoding/binary"

// VDI header (little endian), as VirtualBox writes it and qemu's vdi driver
// reads it.
const (
	vdiHeaderEnd    = 0x200
	vdiTypeDynamic  = 1
	vdiTypeFixed    = 2
	vdiTypeUndo     = 3
	vdiTypeDiff     = 4
	vdiVersion11    = 0x00010001
	vdiDefaultBlock = 1 << 20
)

func parseVDIHeader(head []byte) (Header, error) {
	const f = VDI
	le := binary.LittleEndian
	if err := needHead(f, head, vdiHeaderEnd, "header"); err != nil {
		return Header{}, err
	}
	if le.Uint32(head[vdiSignatureOff:]) != vdiSignature {
		return Header{}, invalidf(f, "bad signature")
	}
	if v := le.Uint32(head[0x44:]); v != vdiVersion11 {
		return Header{}, unsupportedf(f, "header version %#x", v)
	}
	typ := le.Uint32(head[0x4c:])
	switch typ {
	case vdiTypeDynamic, vdiTypeFixed:
	case vdiTypeUndo, vdiTypeDiff:
		return Header{}, unsafef(f, "image type %d refers to a parent image", typ)
	default:
		return Header{}, unsupportedf(f, "image type %d", typ)
	}
	if ss := le.Uint32(head[0x168:]); ss != 512 {
		return Header{}, invalidf(f, "sector size %d", ss)
	}
	diskSize := le.Uint64(head[0x170:])
	blockSize := le.Uint32(head[0x178:])
	blocks := le.Uint32(head[0x180:])
	if blockSize != vdiDefaultBlock {
		// qemu accepts only 1 MiB blocks.
		return Header{}, unsupportedf(f, "block size %d", blockSize)
	}
	if diskSize > 1<<53 {
		return Header{}, unsafef(f, "disk size %d is absurd", diskSize)
	}
	// qemu rounds odd sizes (VBoxManage convertfromraw makes them) up.
	diskSize = (diskSize + 511) &^ 511
	if uint64(blocks)*uint64(blockSize) < diskSize {
		return Header{}, invalidf(f, "%d blocks cannot cover disk size %d", blocks, diskSize)
	}
	offBlocks := le.Uint32(head[0x154:])
	offData := le.Uint32(head[0x158:])
	if offBlocks%512 != 0 || offData%512 != 0 || offBlocks < vdiHeaderEnd/2 {
		return Header{}, invalidf(f, "block map at %d / data at %d", offBlocks, offData)
	}
	return Header{Format: f, VirtualSize: int64(diskSize), VDIImageType: typ,
		VDIBlockMapOffset: offBlocks, VDIDataOffset: offData, VDIBlockSize: blockSize, VDIBlocks: blocks}, nil
}

// Package format is the one place where the engine recognises disk-image
// formats and compression wrappers: it sniffs magic numbers (refusing by
// name the formats qemu-img knows and the engine does not, and heads that
// match two formats), validates image headers (refusing images that would
// make qemu-img open other files or use absurd resources), checks the
// structure of qcow2, VDI, dynamic VHD and VHDX files against truncation,
// recognises fixed-VHD footers and DMG trailers, and peels gzip/xz/zstd/lz4
// (pzstd's skippable frames included) layers off a stream.
package format

// Format is a disk-image format the engine knows.
type Format string

// Known image formats.
const (
	Raw   Format = "raw"
	ISO   Format = "iso"
	QCOW2 Format = "qcow2"
	VMDK  Format = "vmdk"
	VHD   Format = "vhd"
	VHDX  Format = "vhdx"
	VDI   Format = "vdi"
	// VMDKDescriptor is a plain-text VMDK descriptor ("# Disk
	// DescriptorFile"). It only names extent files, so it is never safe to
	// hand to qemu-img; Sniff reports it so ParseHeader can refuse it.
	VMDKDescriptor Format = "vmdk-descriptor"
)

// QemuName is the name qemu-img expects after -f.
func (f Format) QemuName() string {
	switch f {
	case VHD:
		return "vpc"
	case ISO:
		return "raw"
	case VMDKDescriptor:
		return "vmdk"
	}
	return string(f)
}

// NeedsConversion reports whether the image must go through qemu-img; raw
// and iso bytes are the disk itself.
func (f Format) NeedsConversion() bool {
	return f != Raw && f != ISO
}

// Compression is a compression wrapper around an image.
type Compression string

// Known compression wrappers. The values are the usual file suffixes.
const (
	None Compression = ""
	Gzip Compression = "gz"
	XZ   Compression = "xz"
	Zstd Compression = "zst"
	// LZ4 is the LZ4 frame format (lz4 -c), decoded in process by
	// pierrec/lz4: 1.8 GB/s here against 0.8 GB/s for `lz4 -dc` to a
	// pipe (200 MB of /usr/lib as a tar).
	LZ4 Compression = "lz4"
)

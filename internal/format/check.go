package format

import (
	"fmt"
	"io"
	"os"
)

// CheckStructure runs the structural check of format f on an image of size
// bytes: qemu-img reads the missing clusters of a truncated qcow2, VDI or
// vmdk as zeros and still exits 0 (check included), so a cut-off download
// would become a "complete" disk with holes. Formats without a check of
// ours (raw, iso) pass; qemu-img check still runs on them.
func CheckStructure(f Format, r io.ReaderAt, size int64) error {
	switch f {
	case QCOW2:
		return CheckQCOW2(r, size)
	case VDI:
		return CheckVDI(r, size)
	case VHD:
		return CheckVHD(r, size)
	case VHDX:
		return CheckVHDX(r, size)
	case VMDK:
		// Also re-reads the header, footer and embedded descriptor from
		// the very bytes qemu-img will open.
		return CheckVMDK(r, size)
	}
	return nil
}

// CheckStructureFile runs CheckStructure on the local file at path.
func CheckStructureFile(f Format, path string) error {
	file, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening %s: %w", path, err)
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	return CheckStructure(f, file, st.Size())
}

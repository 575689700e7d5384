package importer

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/format"
)

// checkStructure runs our own structural checks on an image: qemu-img
// reads the missing clusters of a truncated qcow2 or VDI as zeros and still
// exits 0 (check included, for VDI), so a cut-off download would become a
// "complete" disk with holes. Other formats are left to qemu-img check.
func checkStructure(f format.Format, r io.ReaderAt, size int64) error {
	switch f {
	case format.QCOW2:
		return format.CheckQCOW2(r, size)
	case format.VDI:
		return format.CheckVDI(r, size)
	case format.VHD:
		return format.CheckVHD(r, size)
	}
	return nil
}

// checkStructureFile is checkStructure for a local file.
func checkStructureFile(f format.Format, path string) error {
	file, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening %s: %w", path, err)
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	return checkStructure(f, file, st.Size())
}

// checkExtents refuses a vmdk whose extents are other files: qemu-img would
// open them from the host.
func checkExtents(image string, extents []string) error {
	self, _ := filepath.Abs(image)
	for _, e := range extents {
		p := e
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(self), p)
		}
		if filepath.Clean(p) != filepath.Clean(self) {
			return fmt.Errorf("%w: vmdk names an extent file %q", errdefs.ErrUnsafeImage, e)
		}
	}
	return nil
}

// supportsDirectIO reports whether the filesystem holding path accepts
// O_DIRECT (tmpfs, for one, does not).
func supportsDirectIO(path string) bool {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_DIRECT|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

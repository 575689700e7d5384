package importer

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/format"
)

// checkQCOW2File runs our structural check: qemu-img convert reads the
// missing clusters of a truncated qcow2 as zeros and still exits 0.
func checkQCOW2File(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	return format.CheckQCOW2(f, st.Size())
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

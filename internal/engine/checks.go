package engine

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/format"
	"github.com/diskimport/engine/qemu"
)

// checkStructureFile runs format.CheckStructure on a local file.
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
	return format.CheckStructure(f, file, st.Size())
}

// checkInfoSelfContained refuses an image for which qemu-img info reports
// anything qemu would read besides the image itself: a backing file, an
// external data file, an extent or a child node that is another file. self
// lists the names qemu may give the image itself (its path, or for the
// NBD export of a ranged download the export's URI).
func checkInfoSelfContained(info *qemu.ImageInfo, self ...string) error {
	if info.BackingFilename != "" {
		return fmt.Errorf("%w: image has a backing file %q", errdefs.ErrUnsafeImage, info.BackingFilename)
	}
	if info.DataFile != "" {
		return fmt.Errorf("%w: image has an external data file %q", errdefs.ErrUnsafeImage, info.DataFile)
	}
	if len(info.ExtentFilenames) > 1 {
		return fmt.Errorf("%w: qemu-img reports %d extents %q, want only the image itself", errdefs.ErrUnsafeImage, len(info.ExtentFilenames), info.ExtentFilenames)
	}
	for _, e := range info.ExtentFilenames {
		if !isSelf(e, self) {
			return fmt.Errorf("%w: image names an extent file %q", errdefs.ErrUnsafeImage, e)
		}
	}
	for _, c := range info.Children {
		// "file" is the protocol node under the format: the image itself.
		if c.Name != "file" || (c.Filename != "" && !isSelf(c.Filename, self)) {
			return fmt.Errorf("%w: qemu-img reports a child node %q (%q) besides the image itself", errdefs.ErrUnsafeImage, c.Name, c.Filename)
		}
	}
	return nil
}

// isSelf says whether qemu's name for a file is one of the image's own
// names; relative names are relative to the image's directory.
func isSelf(name string, self []string) bool {
	for _, s := range self {
		if name == s {
			return true
		}
		if filepath.IsAbs(s) {
			p := name
			if !filepath.IsAbs(p) {
				p = filepath.Join(filepath.Dir(s), p)
			}
			if filepath.Clean(p) == filepath.Clean(s) {
				return true
			}
		}
	}
	return false
}

// selfNames lists the names qemu-img may report for the image it opened
// as src: a local path (absolute and as given), or the URI of our NBD
// export's socket.
func selfNames(src string, export *rangedExport) []string {
	if export != nil {
		sock := export.unix.SocketPath()
		return []string{src, "nbd+unix://?socket=" + sock, "nbd+unix:///?socket=" + sock}
	}
	names := []string{src}
	if abs, err := filepath.Abs(src); err == nil {
		names = append(names, abs)
	}
	return names
}

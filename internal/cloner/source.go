package cloner

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/format"
)

// Content types, CDI's x-cdi-content-type values.
const (
	ContentTypeFilesystem = "filesystem-clone"
	ContentTypeBlock      = "blockdevice-clone"
)

// skipAtRoot are entries of a filesystem volume's root that are not the
// volume's content (CDI's cloner leaves lost+found out too).
var skipAtRoot = map[string]bool{"lost+found": true}

// diskImageName is the disk image of a filesystem volume (kubevirt's).
const diskImageName = "disk.img"

// diskImageOnly is the path of the volume dir's disk.img when that
// regular file is all the volume holds (lost+found aside), else "".
func diskImageOnly(dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	image := ""
	for _, e := range entries {
		switch {
		case skipAtRoot[e.Name()]:
		case e.Name() == diskImageName && e.Type().IsRegular():
			image = filepath.Join(dir, e.Name())
		default:
			return ""
		}
	}
	return image
}

// rawDiskImageOnly is diskImageOnly's disk.img when its bytes are a raw
// disk (no image format's or compression's magic in its head: what a
// delta pass takes, as the import's delta route does), else "": a qcow2
// in a filesystem volume is sent whole.
func rawDiskImageOnly(dir string) string {
	image := diskImageOnly(dir)
	if image == "" {
		return ""
	}
	f, err := os.Open(image)
	if err != nil {
		return ""
	}
	defer f.Close()
	head := make([]byte, format.DefaultPeekSize)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return ""
	}
	if c, kind, err := format.Detect(head[:n]); err != nil || c != format.None || kind != format.Raw {
		return ""
	}
	return image
}

// openDevice opens a block device (or image file) and returns its size.
func openDevice(path string) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("opening clone source %s: %w", path, err)
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("sizing clone source %s: %w", path, err)
	}
	return f, size, nil
}

// writeTar writes the contents of the mounted volume dir as a tar to w:
// regular files, directories and symlinks with their modes, owners and
// times; lost+found at the root is left out, and so are sockets and
// devices, which a volume's content does not need.
func writeTar(ctx context.Context, dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	root, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("clone source %s: %w", dir, err)
	}
	if !root.IsDir() {
		return fmt.Errorf("clone source %s is not a directory: %w", dir, errdefs.ErrInvalidOptions)
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		if filepath.Dir(rel) == "." && skipAtRoot[rel] {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case fi.Mode().IsRegular(), fi.IsDir():
		default:
			return nil
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return fmt.Errorf("reading clone source %s: %w", dir, err)
	}
	return tw.Close()
}

// UsedBytes is what a filesystem clone sends, for progress: the logical
// size of the regular files (CDI's cloner_startup.sh measures with du).
func UsedBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

package datasource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/ctxio"
)

type fileSource struct {
	path string
}

// NewFile reads a local regular file or block device. Other kinds of file
// (pipes, character devices) are streamed without a size or a LocalPath.
// Errors surface at Open: a missing or unreadable file wraps
// errdefs.ErrSourceUnreachable and names the path.
func NewFile(path string) Source { return &fileSource{path: path} }

func (s *fileSource) String() string { return s.path }

func (s *fileSource) Open(ctx context.Context) (*Transfer, error) {
	if err := ctx.Err(); err != nil {
		return nil, ctxio.Cancelled("reading "+s.path, err)
	}
	f, err := os.Open(s.path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errdefs.Markf(errdefs.ErrSourceUnreachable, "source file %s does not exist%s", s.path, registryHint(s.path))
		}
		return nil, errdefs.Markf(errdefs.ErrSourceUnreachable, "opening source file %s: %w", s.path, err)
	}
	size, local, err := s.describe(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	body := ctxio.NewReadCloser(ctx, "reading "+s.path, f, f.Close)
	// A pipe or character device is read once; a file or device is read in
	// place by qemu-img, or opened again.
	return &Transfer{Body: body, Size: size, Capabilities: Capabilities{LocalPath: local, OneTime: local == ""}}, nil
}

// describe finds the size and, when qemu-img may read the path in place,
// its absolute name.
func (s *fileSource) describe(f *os.File) (int64, string, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, "", fmt.Errorf("stat source file %s: %w: %w", s.path, errdefs.ErrSourceUnreachable, err)
	}
	// An absolute path keeps qemu-img from reading a name like "nbd:x" or
	// "json:{...}" as a protocol, and survives a different working directory.
	abs, err := filepath.Abs(s.path)
	if err != nil {
		return 0, "", fmt.Errorf("resolving source path %s: %w: %w", s.path, errdefs.ErrInvalidOptions, err)
	}
	mode := fi.Mode()
	switch {
	case mode.IsDir():
		return 0, "", fmt.Errorf("source %s is a directory, not an image file: %w", s.path, errdefs.ErrInvalidOptions)
	case mode.IsRegular():
		return fi.Size(), abs, nil
	case mode&fs.ModeDevice != 0 && mode&fs.ModeCharDevice == 0:
		// Stat reports 0 for block devices; seeking to the end gives the
		// device size without an ioctl.
		size, err := f.Seek(0, io.SeekEnd)
		if err == nil {
			_, err = f.Seek(0, io.SeekStart)
		}
		if err != nil {
			return 0, "", fmt.Errorf("finding size of block device %s: %w: %w", s.path, errdefs.ErrSourceUnreachable, err)
		}
		return size, abs, nil
	default:
		// FIFOs, character devices, sockets: readable once, size unknown.
		return -1, "", nil
	}
}

// registryRef matches what reads as an image in a registry: a host with a
// dot, a port or "localhost", a path, and a tag or digest
// ("quay.io/containerdisks/fedora:40", "localhost:5000/disk@sha256:...").
var registryRef = regexp.MustCompile(`^([a-z0-9-]+\.[a-z0-9.-]+|localhost)(:[0-9]+)?/[a-z0-9._/-]+(:[A-Za-z0-9._-]+|@sha256:[0-9a-f]{64})$`)

// registryHint is the hint a missing path that reads as a registry
// reference gets: the transport it lacks.
func registryHint(path string) string {
	if !registryRef.MatchString(path) {
		return ""
	}
	return " (an image in a registry is docker://" + path + ")"
}

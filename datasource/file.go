package datasource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/ctxio"
)

type fileSource struct {
	path string
}

// NewFile reads a local regular file or block device. Other kinds of file
// (pipes, character devices) are streamed without a size or LocalPath.
// Errors surface at Open: a missing or unreadable file wraps
// errdefs.ErrSourceUnreachable and names the path.
func NewFile(path string) Source { return &fileSource{path: path} }

func (s *fileSource) String() string { return s.path }

func (s *fileSource) Open(ctx context.Context) (*Stream, error) {
	if err := ctx.Err(); err != nil {
		return nil, ctxio.Cancelled("reading "+s.path, err)
	}
	f, err := os.Open(s.path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("source file %s does not exist: %w", s.path, errdefs.ErrSourceUnreachable)
		}
		return nil, fmt.Errorf("opening source file %s: %w: %w", s.path, errdefs.ErrSourceUnreachable, err)
	}
	st, err := s.describe(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	st.Body = ctxio.NewReadCloser(ctx, "reading "+s.path, f, f.Close)
	return st, nil
}

// describe finds the size and whether qemu-img may read the path in place.
func (s *fileSource) describe(f *os.File) (*Stream, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat source file %s: %w: %w", s.path, errdefs.ErrSourceUnreachable, err)
	}
	// An absolute path keeps qemu-img from reading a name like "nbd:x" or
	// "json:{...}" as a protocol, and survives a different working directory.
	abs, err := filepath.Abs(s.path)
	if err != nil {
		return nil, fmt.Errorf("resolving source path %s: %w: %w", s.path, errdefs.ErrInvalidOptions, err)
	}
	mode := fi.Mode()
	switch {
	case mode.IsDir():
		return nil, fmt.Errorf("source %s is a directory, not an image file: %w", s.path, errdefs.ErrInvalidOptions)
	case mode.IsRegular():
		return &Stream{Size: fi.Size(), LocalPath: abs}, nil
	case mode&fs.ModeDevice != 0 && mode&fs.ModeCharDevice == 0:
		// Stat reports 0 for block devices; seeking to the end gives the
		// device size without an ioctl.
		size, err := f.Seek(0, io.SeekEnd)
		if err == nil {
			_, err = f.Seek(0, io.SeekStart)
		}
		if err != nil {
			return nil, fmt.Errorf("finding size of block device %s: %w: %w", s.path, errdefs.ErrSourceUnreachable, err)
		}
		return &Stream{Size: size, LocalPath: abs}, nil
	default:
		// FIFOs, character devices, sockets: readable once, size unknown.
		return &Stream{Size: -1}, nil
	}
}

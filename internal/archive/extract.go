// Package archive extracts a tar stream into a directory without ever
// touching anything outside it. Every member path is checked lexically
// (no absolute names, no ".." components), and every directory on the way
// to a member is opened one component at a time with O_NOFOLLOW relative to
// the destination's descriptor, so a symlink planted by an earlier member
// (or already present) can never redirect a later write. Device nodes and
// fifos are refused; regular files are written sparsely.
package archive

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/iostage"
)

// Options tune Extract. The zero value is the safe default.
type Options struct {
	// SkipOwnership leaves extracted entries owned by the current user even
	// when running as root (by default root restores the archive's uid/gid,
	// as tar -p does).
	SkipOwnership bool
	// AllowOutsideSymlinks accepts symlinks whose target is absolute or
	// climbs above the destination (common in root-filesystem tarballs).
	// They are still never followed while extracting. Default: refused.
	AllowOutsideSymlinks bool
	// Logger receives debug messages; nil means slog.Default().
	Logger *slog.Logger
}

// Stats counts what Extract created.
type Stats struct {
	Files, Dirs, Symlinks, HardLinks int
	// Bytes is the total logical size of the regular files written.
	Bytes int64
}

// dirMeta is a directory's metadata, applied after everything inside it has
// been written: writing children changes a directory's mtime, and a
// read-only mode would stop a non-root extractor from filling it.
type dirMeta struct {
	rel      string
	mode     uint32
	uid, gid int
	atime    time.Time
	mtime    time.Time
}

type extractor struct {
	ctx   context.Context
	root  int // descriptor of the destination directory
	opts  Options
	chown bool
	log   *slog.Logger
	buf   []byte
	// physical counts the bytes archive/tar takes from the archive
	// stream. archive/tar hands back the holes of a sparse member (GNU or
	// PAX sparse map) as zeros it makes itself, without reading the stream,
	// so a read of a member that did not move this count is a hole: it can
	// become a hole in the file without looking at a byte. (archive/tar's
	// own hole-seeking copy is unexported, and its sparse map is not
	// exposed.)
	physical *iostage.Counter
	dirs     map[string]dirMeta
	stats    Stats
}

// copyChunk is how much file data is read at once; sparseBlock is the unit
// checked for zeros (zero blocks become holes).
const (
	copyChunk   = 1 << 20
	sparseBlock = 64 << 10
)

// Extract reads the tar stream r and recreates its regular files,
// directories, symlinks and hard links under dir, which must exist. Modes
// and modification times are kept, ownership too when running as root.
// Members that would land outside dir, device nodes and fifos fail the
// extraction with an error wrapping errdefs.ErrUnsafeImage; a damaged
// archive fails with errdefs.ErrInvalidImage. Extract does not remove what
// it wrote before a failure: extract into a fresh directory and Commit it
// (or remove it) to get all-or-nothing behaviour.
func Extract(ctx context.Context, r io.Reader, dir string, opts Options) (Stats, error) {
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Stats{}, fmt.Errorf("opening extraction directory %s: %w", dir, err)
	}
	defer unix.Close(root)
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	x := &extractor{
		ctx:   ctx,
		root:  root,
		opts:  opts,
		chown: !opts.SkipOwnership && os.Geteuid() == 0,
		log:   log,
		buf:   make([]byte, copyChunk),
		dirs:  map[string]dirMeta{},
	}
	x.physical = iostage.NewCounter(r)
	tr := tar.NewReader(x.physical)
	for {
		if err := ctx.Err(); err != nil {
			return x.stats, fmt.Errorf("extracting archive: %w: %w", errdefs.ErrCancelled, err)
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return x.stats, readError(err)
		}
		if err := x.entry(hdr, tr); err != nil {
			return x.stats, err
		}
	}
	if err := x.finishDirs(); err != nil {
		return x.stats, err
	}
	log.Debug("archive extracted", "dir", dir, "files", x.stats.Files, "dirs", x.stats.Dirs,
		"symlinks", x.stats.Symlinks, "hardlinks", x.stats.HardLinks, "bytes", x.stats.Bytes)
	return x.stats, nil
}

// readError classifies a tar read failure: a malformed or truncated archive
// is an invalid image; anything else (the source broke off, cancellation)
// keeps its own class.
func readError(err error) error {
	if errors.Is(err, tar.ErrHeader) || errors.Is(err, tar.ErrFieldTooLong) || errors.Is(err, tar.ErrInsecurePath) ||
		errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("reading tar archive: %w: %v", errdefs.ErrInvalidImage, err)
	}
	return fmt.Errorf("reading tar archive: %w", err)
}

func (x *extractor) entry(hdr *tar.Header, tr *tar.Reader) error {
	rel, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader:
		return nil // pax defaults; archive/tar already applies what matters
	case tar.TypeDir:
		return x.dir(rel, hdr)
	case tar.TypeReg, tar.TypeRegA, tar.TypeCont, tar.TypeGNUSparse:
		return x.file(rel, hdr, tr)
	case tar.TypeSymlink:
		return x.symlink(rel, hdr)
	case tar.TypeLink:
		return x.hardlink(rel, hdr)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return fmt.Errorf("archive member %q is a device node or fifo (type %q), which is never extracted: %w",
			hdr.Name, hdr.Typeflag, errdefs.ErrUnsafeImage)
	default:
		return fmt.Errorf("archive member %q has unsupported type %q: %w", hdr.Name, hdr.Typeflag, errdefs.ErrInvalidImage)
	}
}

func (x *extractor) dir(rel string, hdr *tar.Header) error {
	if rel == "" {
		return nil // the destination itself keeps its own metadata
	}
	parents, base := splitParent(rel)
	pfd, err := x.openParent(parents, true)
	if err != nil {
		return err
	}
	defer closeParent(x, pfd)
	var st unix.Stat_t
	err = unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
		// Seen before (or an implicit parent): only the metadata changes.
	case err == nil:
		if err := unix.Unlinkat(pfd, base, 0); err != nil {
			return fmt.Errorf("replacing %q with a directory: %w", rel, err)
		}
		fallthrough
	case errors.Is(err, unix.ENOENT):
		if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
			return fmt.Errorf("creating directory %q: %w", rel, err)
		}
	default:
		return fmt.Errorf("checking %q: %w", rel, err)
	}
	if _, seen := x.dirs[rel]; !seen {
		x.stats.Dirs++
	}
	x.dirs[rel] = dirMeta{rel: rel, mode: uint32(hdr.Mode) & 0o7777, uid: hdr.Uid, gid: hdr.Gid,
		atime: accessTime(hdr), mtime: hdr.ModTime}
	return nil
}

func (x *extractor) file(rel string, hdr *tar.Header, tr *tar.Reader) error {
	if rel == "" {
		return fmt.Errorf("archive member %q names the destination itself as a file: %w", hdr.Name, errdefs.ErrUnsafeImage)
	}
	pfd, base, err := x.openSlot(rel)
	if err != nil {
		return err
	}
	defer closeParent(x, pfd)
	if err := x.checkRoom(hdr.Name, hdr.Size); err != nil {
		return err
	}
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("creating file %q: %w", rel, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	n, err := x.writeSparse(f, tr)
	if err == nil {
		err = x.fileMeta(fd, hdr)
	}
	if cerr := f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("closing %q: %w", rel, cerr)
	}
	if err != nil {
		return fmt.Errorf("writing file %q: %w", rel, err)
	}
	x.stats.Files++
	x.stats.Bytes += n
	return x.setTimes(pfd, base, hdr.ModTime, accessTime(hdr))
}

// fill reads until buf is full or the reader fails; unlike io.ReadFull it
// keeps io.EOF (the member ended) apart from io.ErrUnexpectedEOF (the
// archive is truncated).
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := r.Read(buf[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// fileMeta restores ownership, then the mode (chown clears set-id bits).
func (x *extractor) fileMeta(fd int, hdr *tar.Header) error {
	if x.chown {
		if err := unix.Fchown(fd, hdr.Uid, hdr.Gid); err != nil {
			return fmt.Errorf("chown %d:%d: %w", hdr.Uid, hdr.Gid, err)
		}
	}
	if err := unix.Fchmod(fd, uint32(hdr.Mode)&0o7777); err != nil {
		return fmt.Errorf("chmod %o: %w", hdr.Mode, err)
	}
	return nil
}

func (x *extractor) symlink(rel string, hdr *tar.Header) error {
	if rel == "" {
		return fmt.Errorf("archive member %q names the destination itself as a symlink: %w", hdr.Name, errdefs.ErrUnsafeImage)
	}
	if !x.opts.AllowOutsideSymlinks && !symlinkStaysInside(rel, hdr.Linkname) {
		return fmt.Errorf("archive member %q is a symlink to %q, outside the destination: %w", hdr.Name, hdr.Linkname, errdefs.ErrUnsafeImage)
	}
	pfd, base, err := x.openSlot(rel)
	if err != nil {
		return err
	}
	defer closeParent(x, pfd)
	if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
		return fmt.Errorf("creating symlink %q: %w", rel, err)
	}
	if x.chown {
		if err := unix.Fchownat(pfd, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown symlink %q: %w", rel, err)
		}
	}
	x.stats.Symlinks++
	return x.setTimes(pfd, base, hdr.ModTime, accessTime(hdr))
}

func (x *extractor) hardlink(rel string, hdr *tar.Header) error {
	if rel == "" {
		return fmt.Errorf("archive member %q names the destination itself as a hard link: %w", hdr.Name, errdefs.ErrUnsafeImage)
	}
	old, err := cleanName(hdr.Linkname)
	if err != nil {
		return fmt.Errorf("hard link %q: %w", hdr.Name, err)
	}
	if old == "" {
		return fmt.Errorf("archive member %q is a hard link to the destination itself: %w", hdr.Name, errdefs.ErrUnsafeImage)
	}
	if old == rel {
		return nil // a link to itself: nothing to do
	}
	oparents, obase := splitParent(old)
	ofd, err := x.openParent(oparents, false)
	if err != nil {
		return fmt.Errorf("hard link %q to %q: %w", hdr.Name, hdr.Linkname, err)
	}
	defer closeParent(x, ofd)
	var st unix.Stat_t
	if err := unix.Fstatat(ofd, obase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("hard link %q to %q, which the archive did not create before: %w: %v", hdr.Name, hdr.Linkname, errdefs.ErrInvalidImage, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("hard link %q to directory %q: %w", hdr.Name, hdr.Linkname, errdefs.ErrInvalidImage)
	}
	pfd, base, err := x.openSlot(rel)
	if err != nil {
		return err
	}
	defer closeParent(x, pfd)
	// Flags 0: a symlink source is linked itself, never followed.
	if err := unix.Linkat(ofd, obase, pfd, base, 0); err != nil {
		return fmt.Errorf("creating hard link %q to %q: %w", rel, old, err)
	}
	x.stats.HardLinks++
	return nil
}

// openSlot opens the directory that will hold the non-directory member
// rel (creating missing parents) and clears its name there (clearSlot);
// the caller closes pfd with closeParent.
func (x *extractor) openSlot(rel string) (pfd int, base string, err error) {
	parents, base := splitParent(rel)
	pfd, err = x.openParent(parents, true)
	if err != nil {
		return -1, "", err
	}
	if err := x.clearSlot(pfd, rel, base); err != nil {
		closeParent(x, pfd)
		return -1, "", err
	}
	return pfd, base, nil
}

// clearSlot makes room for a non-directory member: a later member replaces
// an earlier file or link of the same name (as tar does), but never a
// directory.
func (x *extractor) clearSlot(pfd int, rel, base string) error {
	var st unix.Stat_t
	err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking %q: %w", rel, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("archive member %q would replace a directory: %w", rel, errdefs.ErrInvalidImage)
	}
	if err := unix.Unlinkat(pfd, base, 0); err != nil {
		return fmt.Errorf("replacing %q: %w", rel, err)
	}
	return nil
}

func (x *extractor) setTimes(pfd int, base string, mtime, atime time.Time) error {
	if mtime.IsZero() {
		return nil
	}
	ts := []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	if err := unix.UtimesNanoAt(pfd, base, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("setting times of %q: %w", base, err)
	}
	return nil
}

func accessTime(hdr *tar.Header) time.Time {
	if hdr.AccessTime.IsZero() {
		return hdr.ModTime
	}
	return hdr.AccessTime
}

// finishDirs applies directory metadata, deepest first, so restoring a
// parent's mtime is not undone by work on its children.
func (x *extractor) finishDirs() error {
	dirs := make([]dirMeta, 0, len(x.dirs))
	for _, d := range x.dirs {
		dirs = append(dirs, d)
	}
	sort.Slice(dirs, func(i, k int) bool {
		di, dk := strings.Count(dirs[i].rel, "/"), strings.Count(dirs[k].rel, "/")
		if di != dk {
			return di > dk
		}
		return dirs[i].rel < dirs[k].rel
	})
	for _, d := range dirs {
		if err := x.dirMeta(d); err != nil {
			return err
		}
	}
	return nil
}

func (x *extractor) dirMeta(d dirMeta) error {
	parents, base := splitParent(d.rel)
	pfd, err := x.openParent(parents, false)
	if err != nil {
		return err
	}
	defer closeParent(x, pfd)
	fd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening directory %q: %w", d.rel, err)
	}
	defer unix.Close(fd)
	if x.chown {
		if err := unix.Fchown(fd, d.uid, d.gid); err != nil {
			return fmt.Errorf("chown directory %q: %w", d.rel, err)
		}
	}
	if err := unix.Fchmod(fd, d.mode); err != nil {
		return fmt.Errorf("chmod directory %q: %w", d.rel, err)
	}
	return x.setTimes(pfd, base, d.mtime, d.atime)
}

// openParent opens the directory holding a member, one component at a
// time, refusing to pass through a symlink: O_NOFOLLOW on every component
// keeps the walk inside the destination whatever earlier members planted.
// Missing directories are created (0755, as tar does for parents the
// archive does not list) when create is set.
func (x *extractor) openParent(parents []string, create bool) (int, error) {
	fd := x.root
	for i, comp := range parents {
		next, err := unix.Openat(fd, comp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && create {
			if err = unix.Mkdirat(fd, comp, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = unix.Openat(fd, comp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		if err != nil {
			path := strings.Join(parents[:i+1], "/")
			var st unix.Stat_t
			if serr := unix.Fstatat(fd, comp, &st, unix.AT_SYMLINK_NOFOLLOW); serr == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				err = fmt.Errorf("path goes through symlink %q, which is never followed while extracting: %w", path, errdefs.ErrUnsafeImage)
			} else {
				err = fmt.Errorf("opening directory %q: %w", path, err)
			}
			if fd != x.root {
				unix.Close(fd)
			}
			return -1, err
		}
		if fd != x.root {
			unix.Close(fd)
		}
		fd = next
	}
	return fd, nil
}

func closeParent(x *extractor, fd int) {
	if fd != x.root && fd >= 0 {
		unix.Close(fd)
	}
}

// Package archive extracts a tar stream into a directory without ever
// touching anything outside it. Every member path is checked lexically
// (no absolute names, no ".." components), and every file, directory and
// link is created, opened and changed through an os.Root of the
// destination (as the delta pass's tree target is), which resolves each
// path below the destination and never lets a symlink lead out of it. On
// top of that a symlink on the way to a member is refused, even one that
// stays inside, so a symlink planted by an earlier member (or already
// present) can never redirect a later write. Device nodes and fifos are
// refused; regular files are written sparsely.
package archive

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
	root  *os.Root // the destination: every path is resolved in it
	top   *os.File // the destination opened, for its filesystem's free space
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
	// walked holds the directories walkParents found to be directories.
	// No member can turn one into anything else (clearSlot never replaces
	// a directory), so each is checked once; whatever else changes the tree
	// meanwhile, os.Root still keeps every path inside.
	walked map[string]bool
	// cur is the directory of the last member, kept open while the
	// members that follow stay in it (parentOf).
	cur   *parentDir
	stats Stats
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
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Stats{}, fmt.Errorf("opening extraction directory %s: %w", dir, err)
	}
	defer root.Close()
	top, err := root.Open(".")
	if err != nil {
		return Stats{}, fmt.Errorf("opening extraction directory %s: %w", dir, err)
	}
	defer top.Close()
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	x := &extractor{
		ctx:    ctx,
		root:   root,
		top:    top,
		opts:   opts,
		chown:  !opts.SkipOwnership && os.Geteuid() == 0,
		log:    log,
		buf:    make([]byte, copyChunk),
		dirs:   map[string]dirMeta{},
		walked: map[string]bool{},
	}
	x.cur = &parentDir{root: root, dir: top}
	defer x.closeParent()
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
	pd, base, err := x.parentOf(rel, true)
	if err != nil {
		return err
	}
	fi, err := pd.root.Lstat(base)
	switch {
	case err == nil && fi.IsDir():
		// Seen before (or an implicit parent): only the metadata changes.
	case err == nil:
		if err := pd.root.Remove(base); err != nil {
			return fmt.Errorf("replacing %q with a directory: %w", rel, err)
		}
		fallthrough
	case errors.Is(err, fs.ErrNotExist):
		if err := pd.root.Mkdir(base, 0o700); err != nil {
			return fmt.Errorf("creating directory %q: %w", rel, err)
		}
	default:
		return fmt.Errorf("checking %q: %w", rel, err)
	}
	x.walked[rel] = true
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
	pd, base, err := x.makeSlot(rel)
	if err != nil {
		return err
	}
	if err := x.checkRoom(hdr.Name, hdr.Size); err != nil {
		return err
	}
	// O_CREATE|O_EXCL: os.Root never follows a symlink then, not even one
	// that appeared since the slot was cleared.
	f, err := pd.root.OpenFile(base, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("creating file %q: %w", rel, err)
	}
	n, err := x.writeSparse(f, tr)
	if err == nil {
		err = x.fileMeta(f, hdr)
	}
	if cerr := f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("closing %q: %w", rel, cerr)
	}
	if err != nil {
		return fmt.Errorf("writing file %q: %w", rel, err)
	}
	x.stats.Files++
	x.stats.Bytes += n
	return pd.setTimes(base, hdr.ModTime, accessTime(hdr))
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
func (x *extractor) fileMeta(f *os.File, hdr *tar.Header) error {
	fd := int(f.Fd())
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
	pd, base, err := x.makeSlot(rel)
	if err != nil {
		return err
	}
	if err := pd.root.Symlink(hdr.Linkname, base); err != nil {
		return fmt.Errorf("creating symlink %q: %w", rel, err)
	}
	if x.chown {
		if err := pd.root.Lchown(base, hdr.Uid, hdr.Gid); err != nil {
			return fmt.Errorf("chown symlink %q: %w", rel, err)
		}
	}
	x.stats.Symlinks++
	return pd.setTimes(base, hdr.ModTime, accessTime(hdr))
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
	oparents, _ := splitParent(old)
	if err := x.walkParents(oparents, false); err != nil {
		return fmt.Errorf("hard link %q to %q: %w", hdr.Name, hdr.Linkname, err)
	}
	fi, err := x.root.Lstat(old)
	if err != nil {
		return fmt.Errorf("hard link %q to %q, which the archive did not create before: %w: %v", hdr.Name, hdr.Linkname, errdefs.ErrInvalidImage, err)
	}
	if fi.IsDir() {
		return fmt.Errorf("hard link %q to directory %q: %w", hdr.Name, hdr.Linkname, errdefs.ErrInvalidImage)
	}
	if _, _, err := x.makeSlot(rel); err != nil {
		return err
	}
	// os.Root links a symlink source itself, never its target.
	if err := x.root.Link(old, rel); err != nil {
		return fmt.Errorf("creating hard link %q to %q: %w", rel, old, err)
	}
	x.stats.HardLinks++
	return nil
}

// makeSlot readies the place of the non-directory member rel: its parent
// (parentOf: created when missing, no symlink on the way) and its name
// there cleared: a later member replaces an earlier file or link of the
// same name (as tar does), but never a directory.
func (x *extractor) makeSlot(rel string) (*parentDir, string, error) {
	pd, base, err := x.parentOf(rel, true)
	if err != nil {
		return nil, "", err
	}
	fi, err := pd.root.Lstat(base)
	if errors.Is(err, fs.ErrNotExist) {
		return pd, base, nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("checking %q: %w", rel, err)
	}
	if fi.IsDir() {
		return nil, "", fmt.Errorf("archive member %q would replace a directory: %w", rel, errdefs.ErrInvalidImage)
	}
	if err := pd.root.Remove(base); err != nil {
		return nil, "", fmt.Errorf("replacing %q: %w", rel, err)
	}
	return pd, base, nil
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
	pd, base, err := x.parentOf(d.rel, false)
	if err != nil {
		return err
	}
	dir, err := pd.root.OpenFile(base, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening directory %q: %w", d.rel, err)
	}
	defer dir.Close()
	fd := int(dir.Fd())
	if x.chown {
		if err := unix.Fchown(fd, d.uid, d.gid); err != nil {
			return fmt.Errorf("chown directory %q: %w", d.rel, err)
		}
	}
	if err := unix.Fchmod(fd, d.mode); err != nil {
		return fmt.Errorf("chmod directory %q: %w", d.rel, err)
	}
	return pd.setTimes(base, d.mtime, d.atime)
}

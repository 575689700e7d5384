//go:build linux

package delta

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blkhash"
)

// StagingPrefix starts the name of the hidden directory, at a volume's
// root, where a pass writes the files it sends whole until they are
// renamed into place.
const StagingPrefix = ".importer-delta-"

// WholeFileMax: files of at most this size are sent whole (written to the
// staging directory, renamed into place) rather than compared in place: a
// file no larger than the two ends a pass holds in memory gains nothing
// from being written in place.
const WholeFileMax = 2 * heldSize

// TreeTarget is a filesystem volume's delta pass, receiving end. Every
// path it touches is resolved in an os.Root of the volume (no symlink or
// ".." leads out of it), and a file compared in place must be a regular
// file with one link whose directories are real directories. It keeps
// open only the volume's root (locked: one pass at a time) and the file
// it works on (files are signed, written in layout order and committed
// one after the other; the others are detached), so a volume of more
// files than the process may hold open takes a pass. Its methods are for
// one goroutine.
type TreeTarget struct {
	root    *os.Root
	lock    *os.File // the volume's root directory, flocked
	cur     *treeFile
	dir     string
	m       *Manifest
	layout  Layout
	staging string
	files   []treeFile
	// base: the volume was this pass's base (files compared in place);
	// baseDigest is its digest before the pass.
	base       bool
	baseDigest blkhash.Digest
	offset     int64
	finished   bool
	digest     blkhash.Digest // once finished
}

// treeFile is one regular file of the pass: its target, in place or
// staged.
type treeFile struct {
	entry   *Entry
	t       *Target
	inPlace bool
	staged  string // its name in the root while staged
	// kept: the volume holds the file's bytes already (its digest, the
	// one the manifest names); it has no target.
	kept   bool
	digest blkhash.Digest
}

// OpenTree prepares a pass of the volume described by m onto the volume
// at dir: the volume is scanned and its digest taken (files of the
// manifest's size, larger than WholeFileMax, signed in place on the way);
// when base is named and is not that digest, nothing is compared in place
// and every file is sent whole (a full clone over the pass's records).
func OpenTree(ctx context.Context, dir string, m *Manifest, base string) (_ *TreeTarget, err error) {
	// A manifest Check refuses (a path out of the volume, sizes whose sum
	// wraps) is refused before the volume is opened.
	if err := m.Check(); err != nil {
		return nil, err
	}
	layout, err := m.LayOut()
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("filesystem delta target %s: %w: %w", dir, err, errdefs.ErrNoDeltaBase)
	}
	tt := &TreeTarget{root: root, dir: dir, m: m, layout: layout}
	defer func() {
		if err != nil {
			tt.Close()
		}
	}()
	if tt.lock, err = root.Open("."); err != nil {
		return nil, fmt.Errorf("filesystem delta target %s: %w", dir, err)
	}
	if err := unix.Flock(int(tt.lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, fmt.Errorf("filesystem delta target %s is being written by another pass: %w", dir, errdefs.ErrTargetBusy)
	}
	// Files that cannot fit are refused before anything is made: the
	// signatures held are 32 bytes per 64 KiB of them.
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil, fmt.Errorf("filesystem delta target %s: %w", dir, err)
	}
	if capacity := int64(st.Blocks) * st.Bsize; tt.layout.Size > capacity {
		return nil, fmt.Errorf("the volume's files take %d bytes, the filesystem of %s holds %d: %w", tt.layout.Size, dir, capacity, errdefs.ErrTargetTooSmall)
	}
	// Before anything in it is read or removed, a directory no volume
	// looks like is refused.
	have, err := scanTree(ctx, dir, true)
	if err != nil {
		return nil, err
	}
	if err := tt.signInPlace(ctx, have); err != nil {
		return nil, err
	}
	digests, err := tt.digestsOf(ctx, have)
	if err != nil {
		return nil, err
	}
	tt.baseDigest = TreeDigest(have, digests)
	tt.base = base == "" || base == FormatTreeDigest(tt.baseDigest)
	if tt.base {
		tt.keep(have, digests)
	} else {
		for k := range tt.files {
			if f := &tt.files[k]; f.inPlace {
				f.t.Close()
				*f = treeFile{entry: f.entry}
			}
		}
	}
	if err := tt.stage(ctx); err != nil {
		return nil, err
	}
	return tt, nil
}

// signInPlace opens and signs, in place, each file of the manifest that
// the volume holds as a regular file of the same size, with one link,
// under real directories, and larger than WholeFileMax.
func (tt *TreeTarget) signInPlace(ctx context.Context, have *Manifest) error {
	kinds := map[string]*Entry{}
	for i := range have.Entries {
		kinds[have.Entries[i].Path] = &have.Entries[i]
	}
	tt.files = make([]treeFile, len(tt.layout.Files))
	for k, i := range tt.layout.Files {
		e := &tt.m.Entries[i]
		tt.files[k].entry = e
		h := kinds[e.Path]
		if e.Size <= WholeFileMax || h == nil || h.Kind != KindFile || h.Size != e.Size || !underDirs(e.Path, kinds) {
			continue
		}
		f, err := tt.root.OpenFile(e.Path, os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
			f.Close()
			continue
		}
		t, err := OpenTargetFile(f, path.Join(tt.dir, e.Path), e.Size)
		if err != nil {
			if errors.Is(err, errdefs.ErrTargetBusy) {
				return err
			}
			continue
		}
		if _, err := t.Sign(ctx); err != nil {
			t.Close()
			if ctx.Err() != nil {
				return err
			}
			continue
		}
		t.detach()
		tt.files[k].t, tt.files[k].inPlace = t, true
	}
	return nil
}

// underDirs: every directory on the way to p is a directory in the
// volume (not a symlink to one).
func underDirs(p string, kinds map[string]*Entry) bool {
	for i := strings.IndexByte(p, '/'); i >= 0; i = nextSlash(p, i) {
		if e := kinds[p[:i]]; e == nil || e.Kind != KindDir {
			return false
		}
	}
	return true
}

// nextSlash is the index of the first "/" in p after i, or -1.
func nextSlash(p string, i int) int {
	j := strings.IndexByte(p[i+1:], '/')
	if j < 0 {
		return -1
	}
	return i + 1 + j
}

// keep marks the small files the volume holds with the digest the
// manifest names, at the same path, under real directories: they are
// neither sent nor staged.
func (tt *TreeTarget) keep(have *Manifest, digests []blkhash.Digest) {
	if len(tt.m.Digests) == 0 {
		return
	}
	kinds := map[string]*Entry{}
	for i := range have.Entries {
		kinds[have.Entries[i].Path] = &have.Entries[i]
	}
	held := map[string]blkhash.Digest{}
	for k, i := range have.Files() {
		held[have.Entries[i].Path] = digests[k]
	}
	for k := range tt.files {
		f := &tt.files[k]
		d, ok := held[f.entry.Path]
		if f.inPlace || !ok || tt.m.Digests[k] != d.String() || kinds[f.entry.Path].Size != f.entry.Size || !underDirs(f.entry.Path, kinds) {
			continue
		}
		// One link: its mode and owner are set, and no name outside the
		// volume may share them.
		fi, err := tt.root.Lstat(f.entry.Path)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Nlink != 1 {
			continue
		}
		f.kept, f.digest = true, d
	}
}

// Kept lists the files the volume keeps (their index in the layout).
func (tt *TreeTarget) Kept() []int {
	var kept []int
	for k, f := range tt.files {
		if f.kept {
			kept = append(kept, k)
		}
	}
	return kept
}

// digestsOf is the content digest of each regular file of have: from the
// signatures taken in place, else read.
func (tt *TreeTarget) digestsOf(ctx context.Context, have *Manifest) ([]blkhash.Digest, error) {
	signed := map[string]blkhash.Digest{}
	for _, f := range tt.files {
		if f.inPlace {
			signed[f.entry.Path] = f.t.sig.Digest
		}
	}
	var digests []blkhash.Digest
	for _, i := range have.Files() {
		e := have.Entries[i]
		if d, ok := signed[e.Path]; ok {
			digests = append(digests, d)
			continue
		}
		f, err := tt.root.OpenFile(e.Path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("reading %s in filesystem delta target %s: %w", e.Path, tt.dir, err)
		}
		d, err := blkhash.SumFile(ctx, f, e.Size, 0)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("hashing %s in filesystem delta target %s: %w", e.Path, tt.dir, err)
		}
		digests = append(digests, d)
	}
	return digests, nil
}

// stage makes the staging directory and, in it, an empty file of the
// right size for each file sent whole.
func (tt *TreeTarget) stage(ctx context.Context) error {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	tt.staging = StagingPrefix + hex.EncodeToString(b)
	if err := tt.root.Mkdir(tt.staging, 0o700); err != nil {
		tt.staging = ""
		return fmt.Errorf("creating the staging directory in %s: %w", tt.dir, err)
	}
	for k := range tt.files {
		f := &tt.files[k]
		if f.inPlace || f.kept {
			continue
		}
		f.staged = tt.staging + "/" + strconv.Itoa(k)
		file, err := tt.root.OpenFile(f.staged, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
		if err == nil {
			if err = file.Truncate(f.entry.Size); err != nil {
				file.Close()
			}
		}
		if err != nil {
			return fmt.Errorf("staging %s in %s: %w", f.entry.Path, tt.dir, err)
		}
		if f.t, err = OpenTargetFile(file, path.Join(tt.dir, f.staged), f.entry.Size); err != nil {
			return err
		}
		// An empty file: its signature is known without reading it.
		f.t.adopt(ZeroSignature(f.entry.Size))
		f.t.detach()
	}
	return ctx.Err()
}

// Base reports whether the volume was the pass's base, and its digest
// before the pass.
func (tt *TreeTarget) Base() (bool, string) { return tt.base, FormatTreeDigest(tt.baseDigest) }

// Signed lists the files compared in place (their index in the layout)
// and their signatures, while no run was applied.
func (tt *TreeTarget) Signed() (files []int, sigs []*Signature) {
	if tt.offset != 0 || tt.finished {
		return nil, nil
	}
	for k, f := range tt.files {
		if f.inPlace {
			files = append(files, k)
			sigs = append(sigs, f.t.Signed())
		}
	}
	return files, sigs
}

// Size is the layout's size: the address space of the pass's runs.
func (tt *TreeTarget) Size() int64 { return tt.layout.Size }

// Offset is where a resumed pass goes on.
func (tt *TreeTarget) Offset() int64 { return tt.offset }

// file finds the file holding [off, off+n), and off within it.
func (tt *TreeTarget) file(off, n int64) (*treeFile, int64, error) {
	k := sort.Search(len(tt.files), func(k int) bool { return tt.layout.Bases[k]+tt.files[k].entry.Size > off })
	if off < tt.offset || n <= 0 || k == len(tt.files) || off < tt.layout.Bases[k] || n > tt.layout.Bases[k]+tt.files[k].entry.Size-off || tt.files[k].kept {
		return nil, 0, fmt.Errorf("delta run of %d bytes at %d (applied up to %d of %d) is not inside one file: %w", n, off, tt.offset, tt.layout.Size, errdefs.ErrInvalidImage)
	}
	return &tt.files[k], off - tt.layout.Bases[k], nil
}

// use makes f the file the pass works on: the one before is detached, f
// opened again (where it is now: in place, or staged) unless it is open.
func (tt *TreeTarget) use(f *treeFile) error {
	if tt.cur == f {
		return nil
	}
	tt.release()
	name := f.entry.Path
	if !f.inPlace {
		name = f.staged
	}
	file, err := tt.root.OpenFile(name, os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening %s in %s again: %w", name, tt.dir, err)
	}
	if err := f.t.reattach(file); err != nil {
		return err
	}
	tt.cur = f
	return nil
}

// release detaches the file the pass works on, if any.
func (tt *TreeTarget) release() {
	if tt.cur != nil {
		tt.cur.t.detach()
		tt.cur = nil
	}
}

// Data writes the source's bytes p at off of the layout.
func (tt *TreeTarget) Data(off int64, p []byte) error {
	f, at, err := tt.file(off, int64(len(p)))
	if err == nil {
		err = tt.use(f)
	}
	if err == nil {
		err = f.t.Data(at, p)
	}
	if err == nil {
		tt.offset = off + int64(len(p))
	}
	return err
}

// Zero makes the n bytes at off of the layout zeros.
func (tt *TreeTarget) Zero(off, n int64) error {
	f, at, err := tt.file(off, n)
	if err == nil {
		err = tt.use(f)
	}
	if err == nil {
		err = f.t.Zero(at, n)
	}
	if err == nil {
		tt.offset = off + n
	}
	return err
}

// Pass sums the files' passes.
func (tt *TreeTarget) Pass() Pass {
	p := Pass{BaseDigest: FormatTreeDigest(tt.baseDigest)}
	for _, f := range tt.files {
		p.Size += f.entry.Size
		p.Blocks += Blocks(f.entry.Size)
		if f.kept {
			continue
		}
		fp := f.t.Pass()
		p.BlocksChanged += fp.BlocksChanged
		p.DataBytes += fp.DataBytes
		p.ZeroBytes += fp.ZeroBytes
	}
	if tt.finished {
		p.Digest = FormatTreeDigest(tt.digest)
	}
	return p
}

// Digest is the volume's digest after the runs applied so far.
func (tt *TreeTarget) Digest() (blkhash.Digest, error) {
	digests := make([]blkhash.Digest, len(tt.files))
	for k, f := range tt.files {
		if f.kept {
			digests[k] = f.digest
			continue
		}
		d, err := f.t.Digest()
		if err != nil {
			return blkhash.Digest{}, err
		}
		digests[k] = d
	}
	return TreeDigest(tt.m, digests), nil
}

// Verify returns the volume's digest after the runs applied so far, and
// an ErrVerifyMismatch unless it is want, the source's as sent.
func (tt *TreeTarget) Verify(want blkhash.Digest) (blkhash.Digest, error) {
	got, err := tt.Digest()
	if err == nil && got != want {
		err = &errdefs.VerifyError{Method: "filesystem delta pass", Detail: fmt.Sprintf("the volume's digest after the pass is %s, the source's %s", FormatTreeDigest(got), FormatTreeDigest(want))}
	}
	return got, err
}

// Finish completes the pass once the volume's digest is want (the
// source's as sent): the files sent whole are synced and renamed into
// place, entries the source does not have removed, directories and
// symlinks made, the directories synced; then the files written in place
// get their held ends (until then they hold zeros there: a pass cut off
// before is no complete copy), and modes, owners and times are set.
func (tt *TreeTarget) Finish(want blkhash.Digest) (blkhash.Digest, error) {
	got, err := tt.Verify(want)
	if err != nil {
		return got, err
	}
	tt.finished, tt.digest = true, got
	for k := range tt.files {
		f := &tt.files[k]
		if f.inPlace || f.kept {
			continue
		}
		if err := tt.use(f); err != nil {
			return got, err
		}
		if err := f.t.Commit(); err != nil {
			return got, err
		}
		if err := setOwnerMode(f.t.File(), f.entry); err != nil {
			return got, err
		}
		// Its size and mode too, before the name points at it (Commit
		// syncs the data of a file that was written to, and only then).
		if err := f.t.File().Sync(); err != nil {
			return got, fmt.Errorf("fsync %s: %w", f.entry.Path, err)
		}
	}
	tt.release() // the staged names change
	if err := tt.place(); err != nil {
		return got, err
	}
	for k := range tt.files {
		f := &tt.files[k]
		if f.kept {
			if err := tt.setKeptOwnerMode(f.entry); err != nil {
				return got, err
			}
		}
		if !f.inPlace {
			continue
		}
		if err := tt.use(f); err != nil {
			return got, err
		}
		if err := setOwnerMode(f.t.File(), f.entry); err != nil {
			return got, err
		}
		if err := f.t.Commit(); err != nil {
			return got, err
		}
	}
	tt.release()
	if err := tt.setTimes(); err != nil {
		return got, err
	}
	if err := tt.root.RemoveAll(tt.staging); err != nil {
		return got, fmt.Errorf("removing the staging directory of %s: %w", tt.dir, err)
	}
	tt.staging = ""
	return got, tt.syncFS()
}

// place makes the volume's tree the manifest's: entries it does not have
// (or of another kind) removed, directories made, symlinks and the files
// sent whole renamed into place from the staging directory; then every
// directory is synced.
func (tt *TreeTarget) place() error {
	want := map[string]*Entry{}
	for i := range tt.m.Entries {
		want[tt.m.Entries[i].Path] = &tt.m.Entries[i]
	}
	have, err := ScanTree(context.Background(), tt.dir)
	if err != nil {
		return err
	}
	// Deepest first, so a directory is emptied before it goes.
	for i := len(have.Entries) - 1; i >= 0; i-- {
		h := have.Entries[i]
		if w := want[h.Path]; w == nil || w.Kind != h.Kind || (h.Kind == KindSymlink && w.Link != h.Link) {
			if err := tt.root.RemoveAll(h.Path); err != nil {
				return fmt.Errorf("removing %s from %s: %w", h.Path, tt.dir, err)
			}
		}
	}
	staged := map[string]string{}
	for _, f := range tt.files {
		if f.staged != "" {
			staged[f.entry.Path] = f.staged
		}
	}
	for i, e := range tt.m.Entries {
		var err error
		switch e.Kind {
		case KindDir:
			if err = tt.root.Mkdir(e.Path, 0o700); errors.Is(err, fs.ErrExist) {
				err = nil
			}
		case KindSymlink:
			if _, lerr := tt.root.Lstat(e.Path); lerr == nil {
				continue // the same link: kept
			}
			tmp := tt.staging + "/l" + strconv.Itoa(i)
			if err = tt.root.Symlink(e.Link, tmp); err == nil {
				err = tt.root.Rename(tmp, e.Path)
			}
		case KindFile:
			if s, ok := staged[e.Path]; ok {
				err = tt.root.Rename(s, e.Path)
			}
		}
		if err != nil {
			return fmt.Errorf("placing %s in %s: %w", e.Path, tt.dir, err)
		}
	}
	dirs := []string{"."}
	for _, e := range tt.m.Entries {
		if e.Kind == KindDir {
			dirs = append(dirs, e.Path)
		}
	}
	for _, d := range dirs {
		if err := tt.syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

func (tt *TreeTarget) syncDir(d string) error {
	f, err := tt.root.Open(d)
	if err != nil {
		return fmt.Errorf("opening %s in %s to sync it: %w", d, tt.dir, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s in %s: %w", d, tt.dir, err)
	}
	return nil
}

// syncFS flushes the volume's filesystem: the modes, owners and times
// just set, in one call.
func (tt *TreeTarget) syncFS() error {
	f, err := tt.root.Open(".")
	if err != nil {
		return fmt.Errorf("opening %s to sync it: %w", tt.dir, err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("syncfs %s: %w", tt.dir, err)
	}
	return nil
}

// setKeptOwnerMode gives a file the volume kept its mode and owner.
func (tt *TreeTarget) setKeptOwnerMode(e *Entry) error {
	f, err := tt.root.OpenFile(e.Path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening %s in %s: %w", e.Path, tt.dir, err)
	}
	defer f.Close()
	return setOwnerMode(f, e)
}

// setOwnerMode gives a file its mode and, when running as root, its
// owner (chown first: it clears set-id bits).
func setOwnerMode(f *os.File, e *Entry) error {
	if os.Geteuid() == 0 {
		if err := f.Chown(e.UID, e.GID); err != nil {
			return fmt.Errorf("chown %s: %w", e.Path, err)
		}
	}
	if err := unix.Fchmod(int(f.Fd()), e.Mode&0o7777); err != nil {
		return fmt.Errorf("chmod %s: %w", e.Path, err)
	}
	return nil
}

// setTimes gives files and directories their times, directories (and
// their owners and modes) last, deepest first, so work inside one does
// not move its time again. Symlinks keep the times of their making.
func (tt *TreeTarget) setTimes() error {
	var dirs []*Entry
	for i := range tt.m.Entries {
		e := &tt.m.Entries[i]
		switch e.Kind {
		case KindDir:
			dirs = append(dirs, e)
		case KindFile:
			mt := time.Unix(0, e.MTime)
			if err := tt.root.Chtimes(e.Path, mt, mt); err != nil {
				return fmt.Errorf("setting the times of %s: %w", e.Path, err)
			}
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		e := dirs[i]
		if os.Geteuid() == 0 {
			if err := tt.root.Lchown(e.Path, e.UID, e.GID); err != nil {
				return fmt.Errorf("chown %s: %w", e.Path, err)
			}
		}
		if err := tt.root.Chmod(e.Path, fs.FileMode(e.Mode&0o777)|goModeBits(e.Mode)); err != nil {
			return fmt.Errorf("chmod %s: %w", e.Path, err)
		}
		mt := time.Unix(0, e.MTime)
		if err := tt.root.Chtimes(e.Path, mt, mt); err != nil {
			return fmt.Errorf("setting the times of %s: %w", e.Path, err)
		}
	}
	return nil
}

// goModeBits are the set-id and sticky bits of mode as fs.FileMode's.
func goModeBits(mode uint32) fs.FileMode {
	var m fs.FileMode
	if mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// Close releases the pass: the files written in place keep zeroed ends
// unless it finished, and the staging directory is removed.
func (tt *TreeTarget) Close() error {
	for _, f := range tt.files {
		if f.t != nil {
			f.t.Close()
		}
	}
	tt.cur = nil
	if tt.staging != "" {
		_ = tt.root.RemoveAll(tt.staging)
		tt.staging = ""
	}
	if tt.lock != nil {
		tt.lock.Close()
	}
	return tt.root.Close()
}

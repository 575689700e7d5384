package imagebuild

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"
)

// Kind is the type of a file system object in a Tree.
type Kind int

const (
	KindDir Kind = iota
	KindFile
	KindSymlink
)

// Entry is one file system object of a layer.
type Entry struct {
	Path     string      // absolute and clean, e.g. /usr/bin/qemu-img
	Kind     Kind        // directory, regular file or symlink
	Perm     fs.FileMode // permission bits only (no setuid or setgid)
	Sticky   bool        // the sticky bit (/tmp)
	UID, GID int         // numeric owner; no user or group names are stored
	Target   string      // a symlink's target, as stored
	Source   string      // a file's contents: the host file at Source, or
	Data     []byte      // these bytes when Source is empty
}

// Tree is the content of one layer, keyed by path. Parent directories
// are added as root-owned 0755 directories unless added explicitly.
type Tree struct {
	entries map[string]Entry
}

// NewTree returns an empty tree.
func NewTree() *Tree {
	return &Tree{entries: map[string]Entry{}}
}

// Dir adds a directory.
func (t *Tree) Dir(p string, perm fs.FileMode, uid, gid int) error {
	return t.Add(Entry{Path: p, Kind: KindDir, Perm: perm, UID: uid, GID: gid})
}

// File adds a root-owned file with the contents of the host file src.
func (t *Tree) File(p, src string, perm fs.FileMode) error {
	return t.Add(Entry{Path: p, Kind: KindFile, Perm: perm, Source: src})
}

// Bytes adds a root-owned file holding data.
func (t *Tree) Bytes(p string, data []byte, perm fs.FileMode) error {
	return t.Add(Entry{Path: p, Kind: KindFile, Perm: perm, Data: data})
}

// Symlink adds a symbolic link at p pointing to target.
func (t *Tree) Symlink(p, target string) error {
	return t.Add(Entry{Path: p, Kind: KindSymlink, Perm: 0o777, Target: target})
}

// Add adds e and the directories above it. Adding the same entry twice
// is allowed; two different entries for one path, or an entry below a
// symlink or a file, are errors.
func (t *Tree) Add(e Entry) error {
	if !path.IsAbs(e.Path) || path.Clean(e.Path) != e.Path || e.Path == "/" {
		return fmt.Errorf("imagebuild: %q is not a clean absolute path below /", e.Path)
	}
	if e.Perm&^fs.ModePerm != 0 {
		return fmt.Errorf("imagebuild: %s: mode %v has more than permission bits", e.Path, e.Perm)
	}
	for dir := path.Dir(e.Path); dir != "/"; dir = path.Dir(dir) {
		parent, ok := t.entries[dir]
		switch {
		case !ok:
			t.entries[dir] = Entry{Path: dir, Kind: KindDir, Perm: 0o755}
		case parent.Kind != KindDir:
			return fmt.Errorf("imagebuild: %s: %s above it is not a directory", e.Path, dir)
		}
	}
	if old, ok := t.entries[e.Path]; ok && !sameEntry(old, e) {
		if !(old.Kind == KindDir && e.Kind == KindDir && implicitDir(old)) {
			return fmt.Errorf("imagebuild: %s added twice, differently", e.Path)
		}
	}
	t.entries[e.Path] = e
	return nil
}

// Has reports whether p is in the tree.
func (t *Tree) Has(p string) bool {
	_, ok := t.entries[p]
	return ok
}

// Paths lists the tree's paths in the order WriteTar writes them.
func (t *Tree) Paths() []string {
	paths := make([]string, 0, len(t.entries))
	for p := range t.entries {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	return paths
}

// WriteTar writes the tree as a tar stream: entries in path order, every
// mtime set to mtime, numeric owners only.
func (t *Tree) WriteTar(w io.Writer, mtime time.Time) error {
	tw := tar.NewWriter(w)
	for _, p := range t.Paths() {
		if err := writeEntry(tw, t.entries[p], mtime.UTC().Truncate(time.Second)); err != nil {
			return err
		}
	}
	return tw.Close()
}

// Tar is WriteTar into memory.
func (t *Tree) Tar(mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	if err := t.WriteTar(&buf, mtime); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeEntry(tw *tar.Writer, e Entry, mtime time.Time) error {
	h := &tar.Header{
		Name:    strings.TrimPrefix(e.Path, "/"),
		Mode:    int64(e.Perm),
		Uid:     e.UID,
		Gid:     e.GID,
		ModTime: mtime,
		Format:  tar.FormatPAX,
	}
	if e.Sticky {
		h.Mode |= 0o1000
	}
	var data []byte
	switch e.Kind {
	case KindDir:
		h.Typeflag = tar.TypeDir
		h.Name += "/"
	case KindSymlink:
		h.Typeflag = tar.TypeSymlink
		h.Linkname = e.Target
	case KindFile:
		h.Typeflag = tar.TypeReg
		data = e.Data
		if e.Source != "" {
			var err error
			if data, err = os.ReadFile(e.Source); err != nil {
				return fmt.Errorf("imagebuild: %s: %w", e.Path, err)
			}
		}
		h.Size = int64(len(data))
	}
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("imagebuild: %s: %w", e.Path, err)
	}
	if _, err := tw.Write(data); err != nil {
		return fmt.Errorf("imagebuild: %s: %w", e.Path, err)
	}
	return nil
}

// implicitDir tells a directory Add made for a parent from one added on
// purpose, which may then set its own owner and mode.
func implicitDir(e Entry) bool {
	return e.Kind == KindDir && e.Perm == 0o755 && e.UID == 0 && e.GID == 0 && !e.Sticky
}

func sameEntry(a, b Entry) bool {
	return a.Kind == b.Kind && a.Perm == b.Perm && a.Sticky == b.Sticky && a.UID == b.UID && a.GID == b.GID &&
		a.Target == b.Target && a.Source == b.Source && bytes.Equal(a.Data, b.Data)
}

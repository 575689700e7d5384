package delta

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blkhash"
)

// A filesystem volume's delta pass treats each regular file as a volume
// of its own: the files of the tree are laid end to end, each starting on
// a block boundary, and that layout is the address space the runs of the
// pass use (so one session, one offset to resume from, one End record).

// Entry kinds.
const (
	KindDir     = "dir"
	KindFile    = "file"
	KindSymlink = "symlink"
)

// Entry is one entry of a filesystem volume.
type Entry struct {
	// Path is slash-separated, relative to the volume's root.
	Path string `json:"path"`
	Kind string `json:"kind"`
	// Mode holds the permission, set-id and sticky bits.
	Mode uint32 `json:"mode"`
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
	// MTime is the modification time in nanoseconds since the epoch.
	MTime int64  `json:"mtime"`
	Size  int64  `json:"size,omitempty"`
	Link  string `json:"link,omitempty"`
}

// Manifest is a volume's entries, each directory before what it holds.
type Manifest struct {
	Entries []Entry `json:"entries"`
	// Digests holds, for each regular file (in Files' order) of at most
	// WholeFileMax bytes, its content digest ("" for the others): a
	// receiver that holds the same bytes there keeps its file, and the
	// file is not sent.
	Digests []string `json:"digests,omitempty"`
}

// skipAtRoot are entries of a volume's root that are not its content.
var skipAtRoot = map[string]bool{"lost+found": true}

// ScanTree lists the volume mounted at dir: directories, regular files
// and symlinks (sockets, fifos and devices are no volume content), in
// lexical order; lost+found at the root is left out.
func ScanTree(ctx context.Context, dir string) (*Manifest, error) {
	return scanTree(ctx, dir, false)
}

// scanTree is ScanTree; strict refuses, as no base, a directory no volume
// looks like: one holding a device node, a fifo or a socket, or with
// another file system mounted below it. A pass lays its directory out as
// the manifest says, removing what it does not list: taken for the
// directory of a block device's node (/dev), it emptied /dev/shm.
func scanTree(ctx context.Context, dir string, strict bool) (*Manifest, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("filesystem volume %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("filesystem volume %s is not a directory: %w", dir, errdefs.ErrInvalidOptions)
	}
	m := &Manifest{}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w: %w", errdefs.ErrCancelled, err)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		if !strings.Contains(rel, string(filepath.Separator)) && (skipAtRoot[rel] || strings.HasPrefix(rel, StagingPrefix)) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if strict {
			if err := volumeContent(p, info, fi); err != nil {
				return err
			}
		}
		e, ok, err := entryOf(filepath.ToSlash(rel), p, info)
		if err == nil && ok {
			m.Entries = append(m.Entries, e)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("scanning filesystem volume %s: %w", dir, err)
	}
	return m, nil
}

// volumeContent refuses an entry no volume holds (see scanTree): a
// device, fifo or socket, or a directory of another file system than the
// volume's top.
func volumeContent(p string, fi, top fs.FileInfo) error {
	t := fi.Mode().Type()
	if t&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeSocket|fs.ModeNamedPipe) != 0 {
		return fmt.Errorf("%s is a %s, which no filesystem volume holds: %w", p, kindWord(t), errdefs.ErrNoDeltaBase)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	topSt, topOK := top.Sys().(*syscall.Stat_t)
	if fi.IsDir() && ok && topOK && st.Dev != topSt.Dev {
		return fmt.Errorf("another file system is mounted at %s: %w", p, errdefs.ErrNoDeltaBase)
	}
	return nil
}

func kindWord(t fs.FileMode) string {
	switch {
	case t&fs.ModeCharDevice != 0:
		return "character device"
	case t&fs.ModeDevice != 0:
		return "block device"
	case t&fs.ModeSocket != 0:
		return "socket"
	}
	return "fifo"
}

// entryOf describes the entry at path p (rel in the volume); ok is false
// for a kind a volume does not carry.
func entryOf(rel, p string, fi fs.FileInfo) (Entry, bool, error) {
	e := Entry{Path: rel, Mode: uint32(fi.Mode().Perm()), MTime: fi.ModTime().UnixNano()}
	if fi.Mode()&fs.ModeSetuid != 0 {
		e.Mode |= syscall.S_ISUID
	}
	if fi.Mode()&fs.ModeSetgid != 0 {
		e.Mode |= syscall.S_ISGID
	}
	if fi.Mode()&fs.ModeSticky != 0 {
		e.Mode |= syscall.S_ISVTX
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.UID, e.GID = int(st.Uid), int(st.Gid)
	}
	switch {
	case fi.IsDir():
		e.Kind = KindDir
	case fi.Mode().IsRegular():
		e.Kind, e.Size = KindFile, fi.Size()
	case fi.Mode()&fs.ModeSymlink != 0:
		link, err := os.Readlink(p)
		if err != nil {
			return e, false, err
		}
		e.Kind, e.Link, e.Mode = KindSymlink, link, 0o777
	default:
		return e, false, nil
	}
	return e, true, nil
}

// maxManifest bounds an encoded manifest a receiver reads (a volume of
// about a hundred thousand entries).
const maxManifest = 64 << 20

// WriteTo encodes m.
func (m *Manifest) WriteTo(w io.Writer) (int64, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return 0, err
	}
	n, err := w.Write(b)
	return int64(n), err
}

// ReadManifest decodes and checks a manifest (Check).
func ReadManifest(r io.Reader) (*Manifest, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxManifest+1))
	if err != nil {
		return nil, fmt.Errorf("reading the volume's manifest: %w", err)
	}
	if len(b) > maxManifest {
		return nil, fmt.Errorf("the volume's manifest passes %d bytes: %w", maxManifest, errdefs.ErrInvalidImage)
	}
	m := &Manifest{}
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("decoding the volume's manifest: %w: %w", err, errdefs.ErrInvalidImage)
	}
	if err := m.Check(); err != nil {
		return nil, err
	}
	return m, nil
}

// Check refuses a manifest a receiver must not apply: a path that is
// absolute, climbs with "..", is not clean or names the root, an entry
// listed twice or before its directory, an unknown kind, a negative size,
// sizes whose layout passes math.MaxInt64 bytes, a symlink that points out
// of the volume.
func (m *Manifest) Check() error {
	kinds := map[string]string{"": KindDir}
	for _, e := range m.Entries {
		bad := func(why string) error {
			return fmt.Errorf("volume manifest entry %q: %s: %w", e.Path, why, errdefs.ErrUnsafeImage)
		}
		if e.Path == "" || e.Path != pathClean(e.Path) || strings.HasPrefix(e.Path, "/") || strings.ContainsRune(e.Path, 0) ||
			e.Path == ".." || strings.HasPrefix(e.Path, "../") || (!strings.Contains(e.Path, "/") && strings.HasPrefix(e.Path, StagingPrefix)) {
			return bad("not a clean path inside the volume")
		}
		if _, dup := kinds[e.Path]; dup {
			return bad("listed twice")
		}
		parent := ""
		if i := strings.LastIndexByte(e.Path, '/'); i >= 0 {
			parent = e.Path[:i]
		}
		if kinds[parent] != KindDir {
			return bad("its directory is not listed before it")
		}
		switch e.Kind {
		case KindDir, KindFile:
		case KindSymlink:
			if !linkStaysInside(e.Path, e.Link) {
				return bad("a symlink to " + e.Link + ", outside the volume")
			}
		default:
			return bad("unknown kind " + e.Kind)
		}
		if e.Size < 0 || (e.Size > 0 && e.Kind != KindFile) {
			return bad(fmt.Sprintf("size %d", e.Size))
		}
		kinds[e.Path] = e.Kind
	}
	if _, err := m.LayOut(); err != nil {
		return err
	}
	if n := len(m.Digests); n != 0 && n != len(m.Files()) {
		return fmt.Errorf("volume manifest has %d file digests for %d files: %w", n, len(m.Files()), errdefs.ErrInvalidImage)
	}
	for _, d := range m.Digests {
		if _, err := blkhash.ParseDigest(d); d != "" && err != nil {
			return fmt.Errorf("volume manifest: %w: %w", err, errdefs.ErrInvalidImage)
		}
	}
	return nil
}

// pathClean is path's lexical clean form ("a//b/./c" → "a/b/c").
func pathClean(p string) string {
	parts := strings.Split(p, "/")
	out := parts[:0:0]
	for _, s := range parts {
		switch s {
		case "", ".":
			continue
		}
		out = append(out, s)
	}
	return strings.Join(out, "/")
}

// linkStaysInside reports whether a symlink at rel pointing to target
// resolves, lexically, inside the volume (it is never followed by the
// receiver; this decides which links the volume may hold).
func linkStaysInside(rel, target string) bool {
	if target == "" || strings.HasPrefix(target, "/") || strings.ContainsRune(target, 0) {
		return false
	}
	depth := strings.Count(rel, "/")
	for _, s := range strings.Split(target, "/") {
		switch s {
		case "", ".":
		case "..":
			if depth--; depth < 0 {
				return false
			}
		default:
			depth++
		}
	}
	return true
}

// Files are the indexes of m's regular files, in order.
func (m *Manifest) Files() []int {
	var files []int
	for i, e := range m.Entries {
		if e.Kind == KindFile {
			files = append(files, i)
		}
	}
	return files
}

// Layout places m's regular files end to end, each on a block boundary:
// Bases[k] is where the k-th file (Files()[k]) starts, Size the end.
type Layout struct {
	Files []int
	Bases []int64
	Size  int64
}

// LayOut lays out m's files. The sizes are a peer's: a layout past
// math.MaxInt64 bytes is refused, never wrapped (sizes of 2^62 bytes four
// times summed to 0, passed the capacity check and had a signature of
// 2^46 block hashes allocated).
func (m *Manifest) LayOut() (Layout, error) {
	l := Layout{Files: m.Files()}
	for _, i := range l.Files {
		e := &m.Entries[i]
		// Rounded up to a block, the file takes what is left of MaxInt64
		// at most; both sides of each comparison are in range.
		if e.Size < 0 || e.Size > math.MaxInt64-(BlockSize-1) || Blocks(e.Size) > (math.MaxInt64-l.Size)/BlockSize {
			return Layout{}, fmt.Errorf("volume manifest entry %q: a file of %d bytes after %d bytes of files passes %d bytes: %w", e.Path, e.Size, l.Size, int64(math.MaxInt64), errdefs.ErrInvalidImage)
		}
		l.Bases = append(l.Bases, l.Size)
		l.Size += Blocks(e.Size) * BlockSize
	}
	return l, nil
}

// TreeDigestPrefix names a filesystem volume's digest.
const TreeDigestPrefix = "tree-blk-sha256:"

// TreeDigest is a volume's digest: the SHA-256 of every entry's kind,
// path, mode, size and link target and, for a regular file, its content
// digest (digests[k] for the k-th file), in order. Owners and times are
// restored but not part of it: a receiver that is not root cannot set
// owners, and a volume's identity is what it holds.
func TreeDigest(m *Manifest, digests []blkhash.Digest) blkhash.Digest {
	h := sha256.New()
	k := 0
	for _, e := range m.Entries {
		var head [12]byte
		binary.BigEndian.PutUint32(head[:4], e.Mode)
		binary.BigEndian.PutUint64(head[4:], uint64(e.Size))
		h.Write([]byte(e.Kind + "\x00" + e.Path + "\x00" + e.Link + "\x00"))
		h.Write(head[:])
		if e.Kind == KindFile {
			h.Write(digests[k][:])
			k++
		}
	}
	var d blkhash.Digest
	h.Sum(d[:0])
	return d
}

// FormatTreeDigest renders a volume's digest.
func FormatTreeDigest(d blkhash.Digest) string { return TreeDigestPrefix + d.Hex() }

// ParseTreeDigest reads a volume's digest.
func ParseTreeDigest(s string) (blkhash.Digest, error) {
	var d blkhash.Digest
	hex, ok := strings.CutPrefix(s, TreeDigestPrefix)
	if !ok {
		return d, fmt.Errorf("volume digest %q does not start with %s: %w", s, TreeDigestPrefix, errdefs.ErrInvalidOptions)
	}
	return blkhash.ParseDigest(blkhash.Algorithm + ":" + hex)
}

// ZeroSignature is the signature of size bytes of zeros: a new, empty
// file's, which a file sent whole is written over.
func ZeroSignature(size int64) *Signature {
	s := &Signature{Size: size, Sums: make([]blkhash.Sum, Blocks(size))}
	zero := blkhash.ZeroBlockSum()
	for i := range s.Sums {
		s.Sums[i] = zero
	}
	if rest := size % BlockSize; rest != 0 {
		s.Sums[len(s.Sums)-1] = blkhash.SumBlocks(make([]byte, rest), 1)[0]
	}
	s.Digest = blkhash.DigestOfSums(s.Sums, size)
	return s
}

// TreeAnswer is a receiver's answer to a filesystem volume's signature
// request: whether its volume is the pass's base, its digest, which files
// (their index in the layout) it compares in place, and which it keeps;
// the signatures of the first follow it on the wire, in that order.
type TreeAnswer struct {
	Base       bool   `json:"base"`
	BaseDigest string `json:"baseDigest"`
	Files      []int  `json:"files"`
	// Kept are the small files (layout index) the receiver holds with
	// the digest the manifest names: they are not sent.
	Kept []int `json:"kept,omitempty"`
}

// maxTreeAnswerHead bounds the answer's JSON part.
const maxTreeAnswerHead = 16 << 20

// WriteTreeAnswer encodes a: its JSON's length (8 bytes big-endian), the
// JSON, then sigs, the signatures of a.Files.
func WriteTreeAnswer(w io.Writer, a *TreeAnswer, sigs []*Signature) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	if _, err := w.Write(binary.BigEndian.AppendUint64(nil, uint64(len(b)))); err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return err
	}
	for _, s := range sigs {
		if _, err := s.WriteTo(w); err != nil {
			return err
		}
	}
	return nil
}

// ReadTreeAnswer decodes the answer to the signature request for m: the
// answer and the signatures by layout index. A file listed twice, out of
// range, or a signature of another size than its file's is refused.
func ReadTreeAnswer(r io.Reader, m *Manifest) (*TreeAnswer, map[int]*Signature, error) {
	var n [8]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, nil, fmt.Errorf("reading the volume's signature answer: %w", err)
	}
	size := binary.BigEndian.Uint64(n[:])
	if size > maxTreeAnswerHead {
		return nil, nil, fmt.Errorf("the volume's signature answer announces %d bytes: %w", size, errdefs.ErrInvalidImage)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, nil, fmt.Errorf("reading the volume's signature answer: %w", err)
	}
	a := &TreeAnswer{}
	if err := json.Unmarshal(b, a); err != nil {
		return nil, nil, fmt.Errorf("decoding the volume's signature answer: %w: %w", err, errdefs.ErrInvalidImage)
	}
	files := m.Files()
	for _, k := range a.Kept {
		if k < 0 || k >= len(files) || k >= len(m.Digests) || m.Digests[k] == "" {
			return nil, nil, fmt.Errorf("the volume's signature answer keeps file %d, of no digest: %w", k, errdefs.ErrInvalidImage)
		}
	}
	sigs := map[int]*Signature{}
	for _, k := range a.Files {
		if k < 0 || k >= len(files) || sigs[k] != nil {
			return nil, nil, fmt.Errorf("the volume's signature answer names file %d of %d: %w", k, len(files), errdefs.ErrInvalidImage)
		}
		s, err := ReadSignature(r, m.Entries[files[k]].Size)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", m.Entries[files[k]].Path, err)
		}
		sigs[k] = s
	}
	return a, sigs, nil
}

package importer_test

// Helpers of the real-image test (TestRealImages): the image library
// (each stored .xz decompressed once, its qemu-img reference computed once),
// a content digest that compares images of 127 GiB virtual size without
// reading their holes, the two HTTP servers, and a tree comparison for
// archives.

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/internal/iostage"
)

// realImagesDir is where the shared real images live, relative to the
// importer package directory (the test's working directory).
const realImagesDir = "../../shared/real-images"

// imageLibrary hands out the decompressed images and their references.
// Decompression and reference conversion happen once per image, on first
// use, into the parent test's temporary directory.
type imageLibrary struct {
	stored string // the read-only directory of .xz files
	cache  string // decompressed images (served over HTTP) under "img/", references under "ref/"
	mu     sync.Mutex
	byName map[string]*libraryEntry
}

type libraryEntry struct {
	decompress sync.Once
	local      string
	decompErr  error

	reference sync.Once
	ref       reference
	refErr    error
}

// reference is `qemu-img convert -O raw` of one image: its path (a sparse
// file), its size and content digest.
type reference struct {
	path   string
	size   int64
	digest string
}

func newImageLibrary(stored, cache string) *imageLibrary {
	return &imageLibrary{stored: stored, cache: cache, byName: map[string]*libraryEntry{}}
}

func (l *imageLibrary) entry(stored string) *libraryEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.byName[stored]
	if e == nil {
		e = &libraryEntry{}
		l.byName[stored] = e
	}
	return e
}

// storedPath is the .xz file as shipped.
func (l *imageLibrary) storedPath(stored string) string {
	return filepath.Join(l.stored, filepath.FromSlash(stored))
}

// servedName is the decompressed image's URL path below the servers' root.
func servedName(stored string) string { return strings.TrimSuffix(stored, ".xz") }

// local returns the decompressed image (xz -dc of the stored file).
func (l *imageLibrary) local(t *testing.T, stored string) string {
	t.Helper()
	e := l.entry(stored)
	e.decompress.Do(func() {
		dst := filepath.Join(l.cache, "img", filepath.FromSlash(servedName(stored)))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			e.decompErr = err
			return
		}
		f, err := os.Create(dst)
		if err != nil {
			e.decompErr = err
			return
		}
		cmd := exec.Command("xz", "-dc", l.storedPath(stored))
		cmd.Stdout = f
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err = cmd.Run()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			e.decompErr = fmt.Errorf("xz -dc %s: %v: %s", stored, err, stderr.String())
			return
		}
		// The images are test inputs: nothing may change them.
		e.decompErr = os.Chmod(dst, 0o444)
		e.local = dst
	})
	if e.decompErr != nil {
		t.Fatal(e.decompErr)
	}
	return e.local
}

// reference converts the decompressed image with the real qemu-img, the
// format named explicitly (as the engine does: a probe could pick another),
// and digests the result.
func (l *imageLibrary) reference(t *testing.T, img realImage) reference {
	t.Helper()
	stored, qemuFormat := img.stored, img.qemu
	src := l.local(t, stored)
	e := l.entry(stored)
	e.reference.Do(func() {
		dst := filepath.Join(l.cache, "ref", filepath.FromSlash(servedName(stored))+".raw")
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			e.refErr = err
			return
		}
		if img.member != "" {
			// The disk in the tar, as tar -x gives it.
			member := dst + ".member"
			if out, err := exec.Command("sh", "-c", `tar -xOf "$1" "$2" > "$3"`, "sh", src, img.member, member).CombinedOutput(); err != nil {
				e.refErr = fmt.Errorf("reference: tar -xOf %s %s: %v\n%s", stored, img.member, err, out)
				return
			}
			src = member
		}
		out, err := exec.Command("qemu-img", "convert", "-q", "-f", qemuFormat, "-O", "raw", src, dst).CombinedOutput()
		if err != nil {
			e.refErr = fmt.Errorf("reference: qemu-img convert -f %s -O raw %s: %v\n%s", qemuFormat, stored, err, out)
			return
		}
		size, digest, err := contentDigest(dst, -1)
		e.ref, e.refErr = reference{path: dst, size: size, digest: digest}, err
	})
	if e.refErr != nil {
		t.Fatal(e.refErr)
	}
	return e.ref
}

// digestBlock is the grid contentDigest hashes on.
const digestBlock = 64 << 10

// contentDigest identifies the first n bytes of path (all of a regular file
// when n < 0): sha256 over the length and, for every 64 KiB block of the grid
// that holds a non-zero byte, its offset and its bytes. Two images have the
// same digest exactly when they have the same length and the same bytes,
// yet holes (found with SEEK_DATA, so a 127 GiB sparse image costs
// milliseconds) are never read. Where SEEK_DATA is unsupported (a block
// device) everything is read. A file shorter than n reads as zero-padded.
func contentDigest(path string, n int64) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	if n < 0 {
		st, err := f.Stat()
		if err != nil {
			return 0, "", err
		}
		n = st.Size()
	}
	h := sha256.New()
	var word [8]byte
	binary.BigEndian.PutUint64(word[:], uint64(n))
	h.Write(word[:])
	buf := make([]byte, digestBlock)
	off := int64(0)
	for off < n {
		data, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		switch {
		case errors.Is(err, unix.ENXIO): // only a hole remains
			return n, hex.EncodeToString(h.Sum(nil)), nil
		case err != nil:
			data = off // no hole information: read it all
		}
		off = data / digestBlock * digestBlock
		if off >= n {
			break
		}
		want := int(min(digestBlock, n-off))
		k, err := f.ReadAt(buf[:want], off)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, "", fmt.Errorf("reading %s at %d: %w", path, off, err)
		}
		if k < want {
			// Past the end of a file shorter than n: zeros, as qemu's
			// raw driver reads the tail of a file that is not a whole
			// number of sectors.
			clear(buf[k:want])
		}
		if !iostage.IsZero(buf[:want]) {
			binary.BigEndian.PutUint64(word[:], uint64(off))
			h.Write(word[:])
			h.Write(buf[:want])
		}
		off += int64(want)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// rangedServer is http.FileServer (which serves byte ranges) counting the
// Range requests per path, so a test can tell that qemu-img read the image
// in place through the engine's NBD export.
type rangedServer struct {
	files  http.Handler
	ranges sync.Map // URL path → *atomic.Int64
}

func (s *rangedServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Range") != "" {
		c, _ := s.ranges.LoadOrStore(r.URL.Path, new(atomic.Int64))
		c.(*atomic.Int64).Add(1)
	}
	s.files.ServeHTTP(w, r)
}

func (s *rangedServer) rangeRequests(urlPath string) int64 {
	c, ok := s.ranges.Load(urlPath)
	if !ok {
		return 0
	}
	return c.(*atomic.Int64).Load()
}

// streamOnlyHandler serves whole files with a length, never advertising or
// honouring Range (many object stores and proxies behave so): the engine
// must copy a convertible image to scratch.
func streamOnlyHandler(root string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := filepath.Join(root, filepath.FromSlash(path.Clean("/"+r.URL.Path)))
		f, err := os.Open(name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
		w.Header().Set("Content-Type", "application/octet-stream")
		if r.Method == http.MethodHead {
			return
		}
		io.Copy(w, f)
	})
}

// serve starts a test server on 127.0.0.1, stopped when the test ends.
func serve(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// treeEntry is what an extracted archive entry must match.
type treeEntry struct {
	mode    fs.FileMode
	content string // regular files: sha256; symlinks: the target
}

// readTree lists dir: every path below it with its type, permissions and
// content digest.
func readTree(t *testing.T, dir string) map[string]treeEntry {
	t.Helper()
	tree := map[string]treeEntry{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		e := treeEntry{mode: info.Mode() & (fs.ModeType | fs.ModePerm)}
		switch {
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			e.content = hex.EncodeToString(sum[:])
		case info.Mode()&fs.ModeSymlink != 0:
			e.content, err = os.Readlink(p)
			if err != nil {
				return err
			}
		}
		tree[filepath.ToSlash(rel)] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

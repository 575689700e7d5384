package imagebuild

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestTarIgnoresInsertionOrderAndHostFileTimes(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "prog")
	if err := os.WriteFile(src, []byte("#!program"), 0o700); err != nil {
		t.Fatal(err)
	}
	mtime := time.Unix(1_700_000_000, 0)
	build := func(reversed bool) []byte {
		tr := NewTree()
		adds := []func() error{
			func() error { return tr.File("/usr/bin/prog", src, 0o755) },
			func() error { return tr.Symlink("/bin", "usr/bin") },
			func() error { return tr.Dir("/data", 0o755, 107, 107) },
			func() error { return tr.Bytes("/etc/passwd", []byte("root:x:0:0::/:/bin/sh\n"), 0o644) },
		}
		if reversed {
			for i, j := 0, len(adds)-1; i < j; i, j = i+1, j-1 {
				adds[i], adds[j] = adds[j], adds[i]
			}
		}
		for _, add := range adds {
			if err := add(); err != nil {
				t.Fatal(err)
			}
		}
		out, err := tr.Tar(mtime)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	first := build(false)
	if err := os.Chtimes(src, time.Now(), time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, build(true)) {
		t.Fatal("the same tree gave different tar bytes")
	}

	var names []string
	r := tar.NewReader(bytes.NewReader(first))
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if !h.ModTime.Equal(mtime) || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: mtime %v uname %q gname %q, want fixed values", h.Name, h.ModTime, h.Uname, h.Gname)
		}
		if h.Name == "data/" && (h.Uid != 107 || h.Gid != 107) {
			t.Errorf("data/ owned by %d:%d, want 107:107", h.Uid, h.Gid)
		}
		if h.Name == "usr/bin/prog" && h.Mode != 0o755 {
			t.Errorf("usr/bin/prog mode %o, want 755", h.Mode)
		}
	}
	want := []string{"bin", "data/", "etc/", "etc/passwd", "usr/", "usr/bin/", "usr/bin/prog"}
	if !slicesEqual(names, want) {
		t.Errorf("entries %q, want %q", names, want)
	}
}

func TestTreeRefusesConflicts(t *testing.T) {
	tr := NewTree()
	if err := tr.Symlink("/lib", "usr/lib"); err != nil {
		t.Fatal(err)
	}
	if err := tr.Bytes("/lib/x", nil, 0o644); err == nil {
		t.Error("a file below a symlink was accepted")
	}
	if err := tr.Symlink("/lib", "usr/lib"); err != nil {
		t.Errorf("the same symlink twice: %v", err)
	}
	if err := tr.Symlink("/lib", "usr/lib64"); err == nil {
		t.Error("a second, different /lib was accepted")
	}
	if err := tr.Bytes("/usr/../etc", nil, 0o644); err == nil {
		t.Error("an unclean path was accepted")
	}
	if err := tr.Bytes("/usr/bin/x", nil, 0o4755); err == nil {
		t.Error("a setuid mode was accepted")
	}
	// A directory made for a parent may be given its owner later.
	if err := tr.Bytes("/data/keep", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := tr.Dir("/data", 0o755, 107, 107); err != nil {
		t.Errorf("owning an implicit directory: %v", err)
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

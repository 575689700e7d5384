package imagebuild

import (
	"os"
	"path/filepath"
	"testing"
)

func TestAddHostFileMirrorsSymlinks(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// root/lib -> usr/lib; usr/lib/libx.so.1 -> libx.so.1.2.3 (a merged /usr
	// and a soname link, as on Debian).
	must(os.MkdirAll(filepath.Join(root, "usr/lib"), 0o755))
	must(os.WriteFile(filepath.Join(root, "usr/lib/libx.so.1.2.3"), []byte("ELF"), 0o600))
	must(os.Symlink("libx.so.1.2.3", filepath.Join(root, "usr/lib/libx.so.1")))
	must(os.Symlink("usr/lib", filepath.Join(root, "lib")))

	tr := NewTree()
	resolved, links, err := tr.AddHostFile(filepath.Join(root, "lib/libx.so.1"))
	must(err)
	if want := filepath.Join(root, "usr/lib/libx.so.1.2.3"); resolved != want {
		t.Errorf("resolved to %s, want %s", resolved, want)
	}
	wantLinks := map[string]string{
		filepath.Join(root, "lib"):               "usr/lib",
		filepath.Join(root, "usr/lib/libx.so.1"): "libx.so.1.2.3",
	}
	if len(links) != len(wantLinks) {
		t.Errorf("symlinks %q, want %v", links, wantLinks)
	}
	for p, target := range wantLinks {
		e, ok := tr.entries[p]
		if !ok || e.Kind != KindSymlink || e.Target != target {
			t.Errorf("%s: %+v, want a symlink to %s", p, e, target)
		}
	}
	if e := tr.entries[resolved]; e.Kind != KindFile || e.Perm != 0o644 {
		t.Errorf("%s: %+v, want a 0644 file", resolved, e)
	}

	must(os.Symlink("loop", filepath.Join(root, "loop")))
	if _, _, err := tr.AddHostFile(filepath.Join(root, "loop")); err == nil {
		t.Error("a symlink loop was accepted")
	}
}

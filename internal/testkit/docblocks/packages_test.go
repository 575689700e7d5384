package docblocks

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// packageTable returns the folders ARCHITECTURE.md's package table names
// in its first column (`internal/volume/`), each row's names together.
func packageTable(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Packages\n")
	if !ok {
		t.Fatal("ARCHITECTURE.md has no ## Packages section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	name := regexp.MustCompile("`([a-z0-9_./-]+/)`")
	var dirs []string
	for line := range strings.Lines(section) {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			dirs = append(dirs, strings.TrimSuffix(m[1], "/"))
		}
	}
	if len(dirs) < 10 {
		t.Fatalf("ARCHITECTURE.md's package table names %d folders: %q", len(dirs), dirs)
	}
	return dirs
}

// goPackageDirs returns the folders of the repository that hold Go files,
// testdata, caches and build output left out.
func goPackageDirs(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch {
			case rel == ".git", rel == "bin", rel == "man", rel == "bench/cache", rel == "bench/results", d.Name() == "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if dir := filepath.Dir(rel); strings.HasSuffix(rel, ".go") && !seen[dir] {
			seen[dir] = true
			dirs = append(dirs, filepath.ToSlash(dir))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// ARCHITECTURE.md's package table matches the tree: every folder it names
// exists, and every folder of Go files is one of them or lies inside one
// (bench/benchtool in bench/, a kit in internal/testkit/), so a package
// moved or added without its row fails here.
func TestPackageTableMatchesTheTree(t *testing.T) {
	table := packageTable(t)
	for _, dir := range table {
		if st, err := os.Stat(filepath.Join(root, dir)); err != nil || !st.IsDir() {
			t.Errorf("ARCHITECTURE.md's package table names %s/, which is not a folder of the tree", dir)
		}
	}
	for _, dir := range goPackageDirs(t) {
		covered := false
		for _, row := range table {
			if dir == row || strings.HasPrefix(dir, row+"/") {
				covered = true
				break
			}
		}
		if !covered {
			t.Errorf("%s/ holds Go files and has no row in ARCHITECTURE.md's package table", dir)
		}
	}
}

// ARCHITECTURE.md's table is the only package table: another document
// links to it rather than keeping a second list that would go stale.
func TestOnlyArchitectureHasAPackageTable(t *testing.T) {
	header := regexp.MustCompile(`(?mi)^\|\s*packages?\s*\|`)
	for _, f := range repoDocs(t) {
		if f == "ARCHITECTURE.md" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if header.Match(data) {
			t.Errorf("%s has a package table: ARCHITECTURE.md's is the one", f)
		}
	}
}

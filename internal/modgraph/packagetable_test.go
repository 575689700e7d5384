package modgraph_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// ARCHITECTURE.md's package table is the tree's one package table: every
// package of the module lies in a folder a row names (a row's folder holds
// its subpackages, as internal/testkit/'s holds the kits), and every folder
// a row names exists.
func TestArchitecturePackageTableMatchesTheTree(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "\n## Packages\n")
	if !ok {
		t.Fatal("ARCHITECTURE.md has no Packages section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	// A row's first cell names its folders as `path/`.
	folder := regexp.MustCompile("`([a-z0-9/_-]+/)`")
	var named []string
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		for _, m := range folder.FindAllStringSubmatch(cells[1], -1) {
			named = append(named, m[1])
			if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
				t.Errorf("the table names %s, which is not in the tree", m[1])
			}
		}
	}
	if len(named) < 20 {
		t.Fatalf("only %d folders named in the table: %q", len(named), named)
	}
	cmd := exec.Command(goBin, "list", "-f", "{{.Dir}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		rel += "/"
		covered := false
		for _, n := range named {
			covered = covered || strings.HasPrefix(rel, n)
		}
		if !covered {
			t.Errorf("package %s has no row in ARCHITECTURE.md's package table", rel)
		}
	}
}

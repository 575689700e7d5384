package modgraph_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A one-file program that imports importer, in a module of its own with a
// replace directive to this clone (as README's library example builds
// one), lists the library and no k8s.io or sigs.k8s.io module in
// `go list -m all`: the Kubernetes API is deploy/'s (a module of its own),
// and neither bench/ nor deploy/ is a requirement of the library.
// goAndRoot returns the go command (the test skips without one) and the
// repository's root.
func goAndRoot(t *testing.T) (goBin, root string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	root, err = filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return goBin, root
}

func TestProgramImportingTheLibraryHasNoKubernetesModule(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go mod tidy in a module of its own")
	}
	goBin, root := goAndRoot(t)
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/usesimporter\n\ngo 1.26.0\n\n"+
		"require github.com/diskimport/engine v0.0.0-00010101000000-000000000000\n\n"+
		"replace github.com/diskimport/engine => "+root+"\n")
	write("main.go", `package main

import (
	"context"
	"fmt"

	"github.com/diskimport/engine/importer"
)

func main() {
	res, err := importer.Import(context.Background(), importer.Options{Source: "a.img", Target: "b.img"})
	fmt.Println(res, err)
}
`)
	// The module cache this machine already has; the proxy is asked only
	// for what it lacks. No go.work of an enclosing directory applies.
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("mod", "tidy")
	modules := run("list", "-m", "all")
	var library bool
	for _, line := range strings.Split(strings.TrimSpace(modules), "\n") {
		path, _, _ := strings.Cut(line, " ")
		switch {
		case path == "github.com/diskimport/engine":
			library = true
		case strings.HasPrefix(path, "k8s.io/"), strings.HasPrefix(path, "sigs.k8s.io/"):
			t.Errorf("a program importing importer gets %s", line)
		case strings.HasPrefix(path, "github.com/diskimport/engine/"):
			t.Errorf("a program importing importer gets the tool module %s", line)
		}
	}
	if !library {
		t.Fatalf("go list -m all does not list the library:\n%s", modules)
	}
	t.Logf("%d modules", strings.Count(modules, "\n"))
}

// The packages under internal/ are mechanisms and test kits below the
// public packages: none imports a public package but errdefs (the
// sentinels, which import no other public package), so no arrow runs from
// internal/ up to what a user imports. The CDI contract, which must import
// importer, is the binary's own package (cmd/importer/internal/cdi). A
// package's tests may drive it through the public API (go list without
// -test lists the packages' own imports).
func TestInternalPackagesImportNoPublicPackage(t *testing.T) {
	goBin, root := goAndRoot(t)
	const module = "github.com/diskimport/engine/"
	cmd := exec.Command(goBin, "list", "-f", `{{.ImportPath}}|{{join .Imports " "}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var internal int
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, imports, _ := strings.Cut(line, "|")
		pkg := strings.TrimPrefix(path, module)
		below := strings.HasPrefix(pkg, "internal/")
		if below {
			internal++
		}
		if !below && pkg != "errdefs" {
			continue
		}
		for _, imp := range strings.Fields(imports) {
			dep, ours := strings.CutPrefix(imp, module)
			if !ours || strings.HasPrefix(dep, "internal/") {
				continue
			}
			if pkg == "errdefs" || dep != "errdefs" {
				t.Errorf("%s imports the public package %s", pkg, dep)
			}
		}
	}
	if internal < 10 {
		t.Fatalf("only %d internal packages listed:\n%s", internal, out)
	}
}

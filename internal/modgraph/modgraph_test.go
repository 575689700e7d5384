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
func TestProgramImportingTheLibraryHasNoKubernetesModule(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go mod tidy in a module of its own")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
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

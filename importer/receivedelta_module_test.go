package importer_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A program in a module of its own (a replace directive to this clone, as
// README's library example builds one) receives a delta pass through
// ReceiveDelta with runs of its own, a datasource.Runs with a gap before
// and after its one changed block: it compiles and runs without any
// internal package, its target ends byte for byte the source, and the
// Result reports the pass (one block changed, the source's digest,
// verified).
func TestReceiveDeltaIsCallableFromAnotherModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program in a module of its own")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	mod, work := t.TempDir(), t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(mod, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/receivesdelta\n\ngo 1.26.0\n\n"+
		"require github.com/diskimport/engine v0.0.0-00010101000000-000000000000\n\n"+
		"replace github.com/diskimport/engine => "+root+"\n")
	write("main.go", receiverProgram)
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(goBin, args...)
		cmd.Dir, cmd.Env = mod, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("mod", "tidy")
	out := run("run", ".", work)
	if want := "complete=true signed=true sent=true digest=true verified=true changed=1\n"; out != want {
		t.Errorf("the program printed %q, want %q", out, want)
	}
	src, err := os.ReadFile(filepath.Join(work, "src.img"))
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.ReadFile(filepath.Join(work, "disk.img"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src, dst) {
		t.Error("the target is not the source after the pass")
	}
}

// receiverProgram is the other module's program: it writes a base and a
// source that differs from it in one 64 KiB block, and sends that block
// alone as the pass's runs onto a copy of the base.
const receiverProgram = `package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/diskimport/engine/importer"
)

// runs is a delta pass's runs: data at offsets, the unchanged blocks
// between them not sent.
type runs struct {
	offs   []int64
	data   [][]byte
	next   int
	digest string
}

func (r *runs) NextRun(context.Context) (int64, []byte, int64, error) {
	if r.next == len(r.offs) {
		return 0, nil, 0, io.EOF
	}
	r.next++
	return r.offs[r.next-1], r.data[r.next-1], 0, nil
}

func (r *runs) Digest() string { return r.digest }

func main() {
	ctx := context.Background()
	dir := os.Args[1]
	base := bytes.Repeat([]byte("base"), 1<<20)
	src := bytes.Clone(base)
	block := bytes.Repeat([]byte{7}, 64<<10)
	copy(src[2<<20:], block)
	target, source := filepath.Join(dir, "disk.img"), filepath.Join(dir, "src.img")
	if err := os.WriteFile(target, base, 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(source, src, 0o644); err != nil {
		log.Fatal(err)
	}
	digest, err := importer.ContentDigest(ctx, importer.Options{Source: source})
	if err != nil {
		log.Fatal(err)
	}
	var signed, sent bool
	res, err := importer.ReceiveDelta(ctx, importer.Options{Target: target}, importer.ReceivedDelta{
		Size: int64(len(src)),
		Runs: &runs{offs: []int64{2 << 20}, data: [][]byte{block}, digest: digest},
		Signed: func(sig *importer.DeltaSignature) {
			signed = true
			var answer bytes.Buffer
			ok, err := sig.Send(&answer)
			sent = ok && err == nil && answer.Len() > 0
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("complete=%v signed=%v sent=%v digest=%v verified=%v changed=%d\n",
		res.Complete, signed, sent, res.ContentDigest == digest, res.Verified, res.Delta.BlocksChanged)
}
`

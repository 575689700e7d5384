package docblocks

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A marker names the block right after it only; an unmarked block has no
// name, and an unclosed fence is an error.
func TestParseNamesTheBlockAfterItsMarker(t *testing.T) {
	md := filepath.Join(t.TempDir(), "x.md")
	text := "# t\n\n<!-- test: one -->\n```sh\necho one\n```\n\n<!-- test: two -->\n\n```go\nx\n```\n```text\nout\n```\n"
	if err := os.WriteFile(md, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	blocks, err := Parse(md)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 3 {
		t.Fatalf("%d blocks, want 3: %+v", len(blocks), blocks)
	}
	if b := blocks[0]; b.Name != "one" || b.Lang != "sh" || b.Text != "echo one\n" || b.Line != 4 {
		t.Errorf("first block %+v", b)
	}
	if blocks[1].Name != "" || blocks[2].Name != "" {
		t.Errorf("a marker separated from its block by a blank line, or no marker, names nothing: %+v", blocks[1:])
	}
	if err := os.WriteFile(md, []byte("```sh\necho\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(md); err == nil {
		t.Error("an unclosed block parsed")
	}
}

// A shell block runs under -e: a failing command fails it, and what it
// left in the background is killed with its process group.
func TestRunShellFailsOnAFailingCommandAndKillsItsChildren(t *testing.T) {
	dir := t.TempDir()
	out, err := RunShell(t, Block{Name: "ok", Text: "sleep 300 & echo $! > pid\necho hello\n"}, dir, nil, time.Minute)
	if err != nil || out != "hello\n" {
		t.Fatalf("%q, %v", out, err)
	}
	if _, err := RunShell(t, Block{Name: "fails", Text: "false\necho not reached\n"}, dir, nil, time.Minute); err == nil {
		t.Error("a failing command did not fail the block")
	}
	pid, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err != nil {
		t.Fatal(err)
	}
	// The exit is an event: a pidfd turns readable when the process ends
	// (a zombie included), or cannot be opened when it is already gone.
	fd, err := unix.PidfdOpen(n, 0)
	if errors.Is(err, unix.ESRCH) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ready, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 10_000)
	if err != nil || ready == 0 {
		t.Fatalf("the background sleep (pid %d) outlived its block (%v)", n, err)
	}
}

// Package docblocks finds the examples of a markdown file that tests run,
// so an example in the README cannot go stale: a fenced block marked by
// an HTML comment on the line before it,
//
//	<!-- test: NAME -->
//	```sh
//	…
//	```
//
// is the block NAME. The comment does not show on GitHub.
package docblocks

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Block is one fenced block of a markdown file.
type Block struct {
	Name string // from its marker; "" for an unmarked block
	Lang string // the fence's info string: sh, go, text…
	Text string // the lines between the fences, each ending in \n
	Line int    // the opening fence's line, counted from 1
}

var marker = regexp.MustCompile(`^<!-- test: ([a-z0-9-]+) -->$`)

// Parse returns every fenced block of the markdown file at path, in order.
func Parse(path string) ([]Block, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var blocks []Block
	var cur *Block
	name := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.Text += line + "\n"
		case strings.HasPrefix(line, "```"):
			cur = &Block{Name: name, Lang: strings.TrimPrefix(line, "```"), Line: n}
			name = ""
		default:
			name = ""
			if m := marker.FindStringSubmatch(line); m != nil {
				name = m[1]
			}
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: a fenced block is not closed", path, cur.Line)
	}
	return blocks, sc.Err()
}

// Named returns the marked blocks of path by name; a name given twice is
// an error.
func Named(path string) (map[string]Block, error) {
	blocks, err := Parse(path)
	if err != nil {
		return nil, err
	}
	named := map[string]Block{}
	for _, b := range blocks {
		if b.Name == "" {
			continue
		}
		if _, dup := named[b.Name]; dup {
			return nil, fmt.Errorf("%s:%d: a second block named %q", path, b.Line, b.Name)
		}
		named[b.Name] = b
	}
	return named, nil
}

// RunShell runs a shell block as a reader would paste it, under
// bash -euo pipefail in dir with env added to the test's environment, and
// returns its standard output and error together. The shell gets a
// process group of its own, killed when it ends or times out, so a server
// the block started in the background does not outlive it.
func RunShell(t testing.TB, b Block, dir string, env []string, timeout time.Duration) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", b.Text)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// The output goes to a file, not a pipe: a server the block left in
	// the background keeps its descriptors, and Run would wait for it.
	outFile, err := os.CreateTemp(t.TempDir(), "block-output-")
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	cmd.Stdout, cmd.Stderr = outFile, outFile
	err = cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // what the block left running
	}
	out, readErr := os.ReadFile(outFile.Name())
	if readErr != nil {
		t.Fatal(readErr)
	}
	t.Logf("block %q (line %d):\n%s--- output:\n%s", b.Name, b.Line, b.Text, out)
	return string(out), err
}

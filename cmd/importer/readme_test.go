package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testkit/docblocks"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// readmeExamples are the blocks of README.md that tests run: commands
// (checked against the Makefile and CI below), image, cli and library
// here, podman in internal/testkit/imagetest (TestREADMEImageExample, under make
// image-test, where the image is built).
var readmeExamples = []string{"commands", "image", "cli", "library-main", "library", "podman"}

func readmeBlocks(t *testing.T) map[string]docblocks.Block {
	t.Helper()
	named, err := docblocks.Named(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	return named
}

// Every fenced block of README.md is marked for a test, and the README's
// two commands are what the Makefile has and what CI runs.
func TestREADMEExamplesAreEachRun(t *testing.T) {
	blocks, err := docblocks.Parse(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	var names []string
	for _, b := range blocks {
		assert.NotEmpty(t, b.Name, "README.md:%d: a block no test runs (mark it <!-- test: NAME --> and run it)", b.Line)
		names = append(names, b.Name)
	}
	assert.ElementsMatch(t, readmeExamples, names)

	commands := readmeBlocks(t)["commands"].Text
	makefile, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	require.NoError(t, err)
	targets := regexp.MustCompile(`(?m)^make ([a-z-]+)`).FindAllStringSubmatch(commands, -1)
	require.Len(t, targets, 2, commands)
	for _, m := range targets {
		assert.Regexp(t, `(?m)^`+m[1]+`:`, string(makefile), "README names make %s", m[1])
	}
	assert.Equal(t, "demo", targets[0][1])
	assert.Equal(t, "test", targets[1][1])
	// .ci/run runs the test command README names.
	ci, err := os.ReadFile(filepath.Join("..", "..", ".ci", "run"))
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^make test$`, string(ci))
}

// The README's examples, run as a reader pastes them: a disk image made
// with qemu-img, imported by the command line onto a loop device, and by
// the library example built as a module of its own (a replace directive
// to this clone); the disks are compared with the image's bytes.
func TestREADMEExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and a program of the library")
	}
	testimg.Need(t, "qemu-img", "xz", "go")
	blocks := readmeBlocks(t)
	bin, err := podBinary()
	require.NoError(t, err)
	engine, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	dir := t.TempDir()
	env := []string{"PATH=" + filepath.Dir(bin) + ":" + os.Getenv("PATH"), "ENGINE=" + engine}
	out, err := docblocks.RunShell(t, blocks["image"], dir, env, 2*time.Minute)
	require.NoError(t, err, out)
	raw, err := os.ReadFile(filepath.Join(dir, "vm.raw"))
	require.NoError(t, err)
	require.Len(t, raw, 64<<20)
	require.True(t, bytes.HasPrefix(raw[8<<20:], []byte("hello from vm1\n")))

	t.Run("cli", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("the loop device needs root")
		}
		testimg.Need(t, "losetup", "cmp")
		backing := filepath.Join(dir, "vm1-disk.img")
		testimg.DetachLoopsWhenDone(t, backing)
		out, err := docblocks.RunShell(t, blocks["cli"], dir, env, 2*time.Minute)
		require.NoError(t, err, out)
		assert.Regexp(t, `format +qcow2 \(xz\)`, out)
		assert.Contains(t, out, "Import complete: /dev/loop")
		assert.Regexp(t, `/dev/loop\d+ holds the image`, out)
		// The block detached its device; its backing file holds the disk.
		got, err := os.ReadFile(backing)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(raw, got[:len(raw)]), "the loop device's first 64 MiB differ from vm.raw")
	})

	t.Run("library", func(t *testing.T) {
		main := blocks["library-main"]
		require.Equal(t, "go", main.Lang)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(main.Text), 0o644))
		out, err := docblocks.RunShell(t, blocks["library"], dir, env, 10*time.Minute)
		require.NoError(t, err, out)
		var res struct {
			Complete     bool   `json:"complete"`
			SourceFormat string `json:"sourceFormat"`
			VirtualSize  int64  `json:"virtualSize"`
		}
		last := out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]
		require.NoError(t, json.Unmarshal([]byte(last), &res), out)
		assert.True(t, res.Complete)
		assert.Equal(t, "qcow2", res.SourceFormat)
		assert.Equal(t, int64(64<<20), res.VirtualSize)
		got, err := os.ReadFile(filepath.Join(dir, "vm1.img"))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(raw, got), "vm1.img differs from vm.raw")
	})
}

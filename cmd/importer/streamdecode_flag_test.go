package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/cdi"
	"github.com/diskimport/engine/internal/testimg"
)

// TestCLINoStreamDecode: a local qcow2.xz is decoded straight onto DEST by
// default, and goes through scratch and qemu-img with --no-stream-decode;
// both give the same disk.
func TestCLINoStreamDecode(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 4<<20, 31)
	q := testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2")
	src := testimg.Compress(t, q, "xz")
	for _, c := range []struct {
		flags   []string
		scratch bool
	}{{nil, false}, {[]string{"--no-stream-decode"}, true}} {
		dest := filepath.Join(t.TempDir(), "out.img")
		args := append(append([]string{"--json", "--scratch", t.TempDir()}, c.flags...), src, dest)
		code, stdout, _ := runCLI(t, nil, env(nil), args...)
		require.Equal(t, cdi.ExitOK, code, args)
		m := decode(t, []byte(stdout))
		assert.Equal(t, c.scratch, m.ScratchUsed, args)
		assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, dest, 4<<20), args)
	}
}

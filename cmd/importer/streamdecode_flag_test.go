package main

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/internal/testkit/hostileimg"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// TestCLINoStreamDecode: a local qcow2.xz is decoded straight onto DEST by
// default, and goes through scratch and qemu-img with --no-stream-decode;
// both give the same disk.
func TestCLINoStreamDecode(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	dir := t.TempDir()
	raw, q := testimg.RawAndQCOW2(t, dir, 4<<20, 31)
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

// TestCLIMaxSpill: --max-spill caps the decoder's spill. A qcow2 whose L2
// table follows its 128 MiB of data, from stdin, spills 64 MiB past the
// decoder's memory: it imports with no cap and fails, saying so, with a
// 16 MiB one; a negative cap is a usage error.
func TestCLIMaxSpill(t *testing.T) {
	const vsize = 128 << 20
	_, clusters := hostileimg.Disk(vsize>>16, 1)
	var img bytes.Buffer
	_, err := hostileimg.QCOW2{VirtualSize: vsize, Clusters: clusters, L2AfterFiller: true}.WriteTo(&img)
	require.NoError(t, err)
	for _, c := range []struct {
		cap  string
		code int
	}{{"", cdi.ExitOK}, {"16Mi", cdi.ExitFailed}, {"-1", cdi.ExitUsage}} {
		dest := filepath.Join(t.TempDir(), "out.img")
		args := []string{"--json", "--scratch", t.TempDir(), "-", dest}
		if c.cap != "" {
			args = append([]string{"--max-spill", c.cap}, args...)
		}
		code, stdout, stderr := runCLI(t, img.Bytes(), env(nil), args...)
		require.Equal(t, c.code, code, args)
		switch c.code {
		case cdi.ExitOK:
			m := decode(t, []byte(stdout))
			assert.True(t, m.ScratchUsed)
			assert.Greater(t, m.ScratchBytes, int64(32<<20))
		case cdi.ExitFailed:
			assert.Contains(t, stderr, "configured spill limit")
		}
	}
}

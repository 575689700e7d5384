package format

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/internal/testkit/testimg"
)

// The rings of a child run by runInflateChild: small, so a test's bounds
// are easy to name.
const (
	testSlotBytes   = 64 << 10
	testSlots       = 4
	testInSlotBytes = 128 << 10
	testInSlots     = 4
)

// inflateChildRun is what the child left: its result records, its
// output ring, its stderr and how it ended.
type inflateChildRun struct {
	results []byte
	ring    []byte
	stderr  string
	err     error
}

// runInflateChild runs the diskimport-inflate child in mode (gzip, zlib
// or deflate) with its rings as the importer gives them (fd 3 the output
// ring, 4 the freed output slots, 5 the input ring, 6 the input slots it
// hands back), input in its input slot 0, and records as all of its
// standard input; this test plays the importer, so it can send what the
// Go side never does.
func runInflateChild(t *testing.T, mode string, input []byte, records ...[]uint32) inflateChildRun {
	t.Helper()
	bin := testimg.InflateChild(t)
	if bin == "" {
		t.Skip("diskimport-inflate is not here (see the log above)")
	}
	memfd := func(name string, size int) (*os.File, []byte) {
		fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
		require.NoError(t, err)
		f := os.NewFile(uintptr(fd), name)
		t.Cleanup(func() { f.Close() })
		require.NoError(t, unix.Ftruncate(fd, int64(size)))
		m, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		require.NoError(t, err)
		t.Cleanup(func() { _ = unix.Munmap(m) })
		return f, m
	}
	ringFile, ring := memfd("ring", testSlotBytes*testSlots)
	inFile, in := memfd("input", testInSlotBytes*testInSlots)
	copy(in, input)
	freeR, freeW, err := os.Pipe()
	require.NoError(t, err)
	backR, backW, err := os.Pipe()
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, f := range []*os.File{freeR, freeW, backR, backW} {
			f.Close()
		}
	})
	var stdin bytes.Buffer
	for _, rec := range records {
		require.NoError(t, binary.Write(&stdin, binary.NativeEndian, rec))
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, mode, strconv.Itoa(testSlotBytes), strconv.Itoa(testSlots),
		strconv.Itoa(testInSlotBytes), strconv.Itoa(testInSlots))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = &stdin, &stdout, &stderr
	cmd.ExtraFiles = []*os.File{ringFile, freeR, inFile, backW}
	err = cmd.Run()
	return inflateChildRun{results: stdout.Bytes(), ring: bytes.Clone(ring), stderr: stderr.String(), err: err}
}

// The child checks every record against its rings, whatever the importer
// would send: one naming no input, an input slot past the ring, more bytes
// than a slot holds or an output no slot holds ends it with the reason,
// before it reads a byte of either ring, and it names no result.
func TestInflateChildRefusesRecordsOutsideItsRings(t *testing.T) {
	for _, tc := range []struct {
		name, mode string
		rec        []uint32
		want       string
	}{
		{"gzip input of no bytes", "gzip", []uint32{0, 0}, "an input record out of bounds"},
		{"gzip input slot past the ring", "gzip", []uint32{testInSlots, 10}, "an input record out of bounds"},
		{"gzip input longer than its slot", "gzip", []uint32{0, testInSlotBytes + 1}, "an input record out of bounds"},
		{"block output of no bytes", "deflate", []uint32{0, 10, 0}, "a block record out of bounds"},
		{"block output longer than a slot", "deflate", []uint32{0, 10, testSlotBytes + 1}, "a block record out of bounds"},
		{"block input slot past the ring", "zlib", []uint32{testInSlots, 10, 100}, "a block record out of bounds"},
		{"block input longer than its slot", "zlib", []uint32{0, testInSlotBytes + 1, 100}, "a block record out of bounds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := runInflateChild(t, tc.mode, nil, tc.rec)
			var exit *exec.ExitError
			require.True(t, errors.As(run.err, &exit), "the child must fail, got %v (stderr %q)", run.err, run.stderr)
			assert.Equal(t, 1, exit.ExitCode())
			assert.Contains(t, run.stderr, tc.want)
			assert.Empty(t, run.results)
		})
	}
}

// The same harness with records in bounds: the child inflates, so the
// refusals above are the bounds' and not the harness's.
func TestInflateChildInflatesRecordsInsideItsRings(t *testing.T) {
	want := variedContent(40000, 7)
	t.Run("deflate block", func(t *testing.T) {
		var z bytes.Buffer
		w, err := flate.NewWriter(&z, flate.BestSpeed)
		require.NoError(t, err)
		_, err = w.Write(want)
		require.NoError(t, err)
		require.NoError(t, w.Close())
		run := runInflateChild(t, "deflate", z.Bytes(), []uint32{0, uint32(z.Len()), testSlotBytes})
		require.NoError(t, run.err, run.stderr)
		require.Len(t, run.results, 8)
		slot, n := binary.NativeEndian.Uint32(run.results), binary.NativeEndian.Uint32(run.results[4:])
		require.Less(t, slot, uint32(testSlots))
		require.Equal(t, uint32(len(want)), n)
		assert.True(t, bytes.Equal(want, run.ring[int(slot)*testSlotBytes:][:n]))
	})
	t.Run("gzip member", func(t *testing.T) {
		z := gzipMember(t, want)
		run := runInflateChild(t, "gzip", z, []uint32{0, uint32(len(z))})
		require.NoError(t, run.err, run.stderr)
		var got []byte
		for r := run.results; len(r) >= 8; r = r[8:] {
			slot, n := binary.NativeEndian.Uint32(r), binary.NativeEndian.Uint32(r[4:])
			require.Less(t, slot, uint32(testSlots))
			got = append(got, run.ring[int(slot)*testSlotBytes:][:n]...)
		}
		assert.True(t, bytes.Equal(want, got), "inflated %d bytes, want %d", len(got), len(want))
	})
}

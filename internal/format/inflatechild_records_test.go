package format

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
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
	return runInflateChildSpeaking(t, inflateProtocol, mode, input, records...)
}

// runInflateChildSpeaking is runInflateChild telling the child protocol.
func runInflateChildSpeaking(t *testing.T, protocol, mode string, input []byte, records ...[]uint32) inflateChildRun {
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
	cmd := exec.Command(bin, protocol, mode, strconv.Itoa(testSlotBytes), strconv.Itoa(testSlots),
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
		require.Len(t, run.results, ringRecordSize)
		slot, n := binary.NativeEndian.Uint32(run.results), binary.NativeEndian.Uint32(run.results[4:])
		require.Less(t, slot, uint32(testSlots))
		require.Equal(t, uint32(len(want)), n)
		assert.True(t, bytes.Equal(want, run.ring[int(slot)*testSlotBytes:][:n]))
	})
	t.Run("gzip member", func(t *testing.T) {
		z := gzipMember(t, want)
		run := runInflateChild(t, "gzip", z, []uint32{0, uint32(len(z))})
		require.NoError(t, run.err, run.stderr)
		got := gzipResults(t, run)
		assert.True(t, bytes.Equal(want, got), "inflated %d bytes, want %d", len(got), len(want))
	})
}

// gzipResults is the bytes the gzip child's records name, in order.
func gzipResults(t *testing.T, run inflateChildRun) []byte {
	t.Helper()
	require.Zero(t, len(run.results)%ringRecordSize, "records of %d bytes", len(run.results))
	var got []byte
	for r := run.results; len(r) > 0; r = r[ringRecordSize:] {
		slot, n := binary.NativeEndian.Uint32(r), binary.NativeEndian.Uint32(r[4:])
		require.Less(t, slot, uint32(testSlots))
		require.LessOrEqual(t, n, uint32(testSlotBytes))
		got = append(got, run.ring[int(slot)*testSlotBytes:][:n]...)
	}
	return got
}

// inputPieces lays the pieces of a gzip stream in input slots 0, 1, … and
// returns the input ring's bytes and a record for each piece.
func inputPieces(t *testing.T, pieces ...[]byte) ([]byte, [][]uint32) {
	t.Helper()
	require.LessOrEqual(t, len(pieces), testInSlots)
	in := make([]byte, testInSlotBytes*len(pieces))
	var recs [][]uint32
	for i, p := range pieces {
		require.NotEmpty(t, p)
		require.LessOrEqual(t, len(p), testInSlotBytes)
		copy(in[i*testInSlotBytes:], p)
		recs = append(recs, []uint32{uint32(i), uint32(len(p))})
	}
	return in, recs
}

// The child's CRC-32 of a member folds each granule of zeros in without
// running it through the CRC (a 16th of its slot in this harness's small
// ring, 64 KiB at most), wherever the runs of zeros and the members' ends
// fall: the members decode, and the same members with a wrong CRC do not.
func TestInflateChildFoldsZeroGranulesIntoTheCRC(t *testing.T) {
	const granule = testSlotBytes / 16
	data := func(n int, seed uint64) []byte { return bytes.Repeat(variedContent(97, seed), n/97+1)[:n] }
	var a, b []byte
	a = append(a, data(3*granule+5, 1)...)
	a = append(a, make([]byte, 7*granule+granule/2)...) // zeros from mid-granule to mid-granule
	a = append(a, data(1, 2)...)
	a = append(a, make([]byte, 2*granule-1)...) // the member ends inside a granule of zeros
	b = append(b, make([]byte, 20*granule)...)  // the next one goes on with zeros, across a slot's end
	b = append(b, data(granule, 3)...)
	b = append(b, make([]byte, testSlotBytes+granule/3)...)
	want := append(bytes.Clone(a), b...)
	require.Less(t, len(want), testSlots*testSlotBytes, "the harness frees no slot")
	z := append(gzipMember(t, a), gzipMember(t, b)...)
	in, recs := inputPieces(t, z)
	run := runInflateChild(t, "gzip", in, recs...)
	require.NoError(t, run.err, run.stderr)
	got := gzipResults(t, run)
	require.True(t, bytes.Equal(want, got), "inflated %d bytes, want %d", len(got), len(want))

	for name, at := range map[string]int{"first member": len(gzipMember(t, a)) - 8, "second member": len(z) - 8} {
		bad := bytes.Clone(z)
		bad[at] ^= 0x01
		in, recs := inputPieces(t, bad)
		run := runInflateChild(t, "gzip", in, recs...)
		require.Error(t, run.err, "%s with a wrong CRC", name)
		assert.Contains(t, run.stderr, "checksum", name)
	}
}

// A member's trailer (its CRC-32 and ISIZE, 8 bytes after the deflate
// data, which inflate may have read ahead) is read wherever the input's
// pieces split it, and checked: the right one decodes, a wrong one fails.
func TestInflateChildReadsTheTrailerAcrossInputSlots(t *testing.T) {
	want := variedContent(40000, 9)
	z := gzipMember(t, want)
	for cut := len(z) - 16; cut < len(z); cut++ {
		for _, bad := range []bool{false, true} {
			zz := bytes.Clone(z)
			if bad {
				zz[len(zz)-5] ^= 0x80 // the CRC's last byte
			}
			// The stream in three pieces: up to cut, one byte, the rest.
			pieces := [][]byte{zz[:cut], zz[cut : cut+1]}
			if cut+1 < len(zz) {
				pieces = append(pieces, zz[cut+1:])
			}
			in, recs := inputPieces(t, pieces...)
			run := runInflateChild(t, "gzip", in, recs...)
			if bad {
				require.Error(t, run.err, "cut at %d of %d, wrong CRC", cut, len(zz))
				assert.Contains(t, run.stderr, "checksum", "cut at %d", cut)
				continue
			}
			require.NoError(t, run.err, "cut at %d of %d: %s", cut, len(zz), run.stderr)
			assert.True(t, bytes.Equal(want, gzipResults(t, run)), "cut at %d", cut)
		}
	}
}

// A member's header with a name, a comment and its own CRC-16 is parsed
// wherever the input's pieces split it, the second member's as the first's.
func TestInflateChildReadsTheHeaderAcrossInputSlots(t *testing.T) {
	want := variedContent(30000, 10)
	var member bytes.Buffer
	zw := gzip.NewWriter(&member)
	zw.Name, zw.Comment = "disk.raw", "a comment of some length"
	_, err := zw.Write(want)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	z := member.Bytes()
	require.Equal(t, byte(0x18), z[3]&0x18, "FNAME and FCOMMENT set")
	z[3] |= 0x02 // FHCRC: the header's CRC-16 follows the comment
	hdrEnd := bytes.IndexByte(z[10+len(zw.Name)+1:], 0) + 10 + len(zw.Name) + 1 + 1
	crc := crc32.ChecksumIEEE(z[:hdrEnd])
	z = slices.Concat(z[:hdrEnd], []byte{byte(crc), byte(crc >> 8)}, z[hdrEnd:])
	two := slices.Concat(z, z)
	for cut := 1; cut < hdrEnd+4; cut++ {
		for _, at := range []int{cut, len(z) + cut} { // in the first member's header, in the second's
			in, recs := inputPieces(t, two[:at], two[at:at+1], two[at+1:])
			run := runInflateChild(t, "gzip", in, recs...)
			require.NoError(t, run.err, "cut at %d: %s", at, run.stderr)
			require.True(t, bytes.Equal(slices.Concat(want, want), gzipResults(t, run)), "cut at %d", at)
		}
	}
}

// A diskimport-inflate of another version refuses the importer before it
// reads anything: this build any protocol but its own, an older build
// this importer's (answering with its usage); the importer names the
// program as the cause, not the image.
func TestInflateChildOfAnotherProtocolIsRefused(t *testing.T) {
	z := gzipMember(t, variedContent(1000, 8))
	for _, protocol := range []string{"1", "3", "gzip"} {
		run := runInflateChildSpeaking(t, protocol, "gzip", z, []uint32{0, uint32(len(z))})
		require.Error(t, run.err, protocol)
		assert.Contains(t, run.stderr, "ring protocol "+inflateProtocol+" is this build's", protocol)
		assert.Empty(t, run.results, protocol)
	}
	failed := otherProtocolFailed("/usr/bin/diskimport-inflate", inflateRingFailed)
	for _, msg := range []string{
		"diskimport-inflate: usage: diskimport-inflate gzip SLOT_BYTES SLOTS [IN_SLOT_BYTES IN_SLOTS], …", // the build before protocol 2
		"diskimport-inflate: ring protocol 3 is this build's; the importer asked for another: …",
	} {
		err := failed(msg, errors.New("exit status 1"))
		require.ErrorIs(t, err, errdefs.ErrInvalidOptions, msg)
		assert.Contains(t, err.Error(), "/usr/bin/diskimport-inflate is another build of diskimport-inflate than this importer's")
	}
	err := failed("diskimport-inflate: corrupt data: invalid deflate block", errors.New("exit status 1"))
	assert.ErrorIs(t, err, errdefs.ErrInvalidImage, "the image's faults stay the image's")
}

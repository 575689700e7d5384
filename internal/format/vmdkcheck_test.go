package format

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
)

// realVMDK makes a 1 MiB vmdk of the given subformat with qemu-img (last
// grain allocated with random data) and returns its bytes.
func realVMDK(t *testing.T, subformat string) []byte {
	t.Helper()
	needTool(t, "qemu-img")
	dir, raw := variedRaw(t, 1<<20, 77)
	p := convert(t, raw, dir, "disk.vmdk", "vmdk", "subformat="+subformat)
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return b
}

func checkVMDKBytes(b []byte) error {
	return CheckVMDK(bytes.NewReader(b), int64(len(b)))
}

func patchLE64(b []byte, off int, v uint64) []byte {
	c := bytes.Clone(b)
	binary.LittleEndian.PutUint64(c[off:], v)
	return c
}

// withFooter turns a qemu-made streamOptimized vmdk into the VMware layout:
// the header defers to a footer (grain directory "at end"), and a footer
// marker, a copy of the header with the real offsets, and an
// end-of-stream marker end the file. fix edits the footer's header copy.
func withFooter(b []byte, fix func(footer []byte)) []byte {
	footer := make([]byte, vmdkSector)
	copy(footer, b[:vmdkSector])
	if fix != nil {
		fix(footer)
	}
	out := patchLE64(b, 56, vmdkGDAtEnd)
	marker := make([]byte, vmdkSector)
	binary.LittleEndian.PutUint32(marker[12:], vmdkMarkerFooter)
	out = append(out, marker...)
	out = append(out, footer...)
	return append(out, make([]byte, vmdkSector)...) // end-of-stream marker: all zero
}

func TestCheckVMDKAcceptsRealImages(t *testing.T) {
	for _, sub := range []string{"monolithicSparse", "streamOptimized"} {
		t.Run(sub, func(t *testing.T) {
			b := realVMDK(t, sub)
			require.NoError(t, checkVMDKBytes(b))
			h, err := ParseHeader(VMDK, b[:min(len(b), DefaultPeekSize)])
			require.NoError(t, err)
			assert.Equal(t, sub, h.VMDKCreateType)
			assert.Equal(t, sub == "streamOptimized", IsStreamOptimizedVMDK(VMDK, h))
			assert.EqualValues(t, 1<<20, h.VirtualSize)
		})
	}
	t.Run("streamOptimized-with-footer", func(t *testing.T) {
		b := realVMDK(t, "streamOptimized")
		f := withFooter(b, nil)
		require.NoError(t, checkVMDKBytes(f))
		// qemu reads it alike: same disk as the original.
		dir := t.TempDir()
		for name, img := range map[string][]byte{"orig.vmdk": b, "footer.vmdk": f} {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), img, 0o644))
			run(t, "qemu-img", "convert", "-f", "vmdk", "-O", "raw", filepath.Join(dir, name), filepath.Join(dir, name+".raw"))
		}
		a, err := os.ReadFile(filepath.Join(dir, "orig.vmdk.raw"))
		require.NoError(t, err)
		c, err := os.ReadFile(filepath.Join(dir, "footer.vmdk.raw"))
		require.NoError(t, err)
		require.True(t, bytes.Equal(a, c), "the footer test image does not read as the original")
	})
}

func TestCheckVMDKHostileHeaders(t *testing.T) {
	sparse := realVMDK(t, "monolithicSparse")
	stream := realVMDK(t, "streamOptimized")
	le := binary.LittleEndian
	for _, c := range []struct {
		name string
		b    []byte
		want error
		msg  string
	}{
		{"capacity 0 with a descriptor", patchLE64(sparse, 12, 0), errdefs.ErrUnsafeImage, "capacity 0"},
		{"capacity 0 without a descriptor", patchLE64(patchLE64(patchLE64(sparse, 12, 0), 28, 0), 36, 0), errdefs.ErrInvalidImage, "capacity is 0"},
		{"descriptor beyond the file's end", sparse[:4096], errdefs.ErrInvalidImage, "beyond the end"},
		{"oversize descriptor", patchLE64(sparse, 36, 4096), errdefs.ErrInvalidImage, "descriptor of 4096 sectors"},
		{"descriptor elsewhere than after the header", patchLE64(sparse, 28, 3), errdefs.ErrUnsafeImage, "not right after the header"},
		{"descriptor without NUL in its sectors", func() []byte {
			b := patchLE64(sparse, 36, 1)
			for i := 0x200; i < 0x400; i++ {
				if b[i] == 0 {
					b[i] = ' ' // the text runs on into the next sector
				}
			}
			return b
		}(), errdefs.ErrUnsafeImage, "NUL"},
		{"parent hint past the descriptor", func() []byte {
			b := bytes.Clone(sparse)
			copy(b[0x200+19*512:], "parentFileNameHint=\"/etc/shadow\"")
			// The descriptor itself ends at the first NUL; make the text run on.
			for i := 0x200; i < 0x200+19*512; i++ {
				if b[i] == 0 {
					b[i] = ' '
				}
			}
			return patchLE64(b, 36, 21)
		}(), errdefs.ErrUnsafeImage, "parent"},
		{"grain directory past the end", patchLE64(sparse, 56, uint64(len(sparse)/512)), errdefs.ErrInvalidImage, "grain directory"},
		{"grain table past the end", func() []byte {
			b := bytes.Clone(sparse)
			gd := le.Uint64(b[56:]) * 512
			le.PutUint32(b[gd:], uint32(len(b)/512))
			return b
		}(), errdefs.ErrInvalidImage, "grain table"},
		{"footer pointing to another footer", withFooter(stream, func(f []byte) { le.PutUint64(f[56:], vmdkGDAtEnd) }), errdefs.ErrUnsafeImage, "another footer"},
		{"footer of another version", withFooter(stream, func(f []byte) { le.PutUint32(f[4:], 1) }), errdefs.ErrUnsafeImage, "does not agree"},
		{"footer with another descriptor", withFooter(stream, func(f []byte) { le.PutUint64(f[36:], 2) }), errdefs.ErrUnsafeImage, "does not agree"},
		{"footer with another capacity", withFooter(stream, func(f []byte) { le.PutUint64(f[12:], 1<<30) }), errdefs.ErrUnsafeImage, "does not agree"},
		{"footer with a bad signature", withFooter(stream, func(f []byte) { copy(f, "XXXX") }), errdefs.ErrInvalidImage, "footer"},
		{"footer without its marker", func() []byte {
			b := withFooter(stream, nil)
			le.PutUint32(b[len(b)-3*512+12:], 0)
			return b
		}(), errdefs.ErrInvalidImage, "footer marker"},
		{"footer without end-of-stream marker", func() []byte {
			b := withFooter(stream, nil)
			le.PutUint32(b[len(b)-512+12:], 7)
			return b
		}(), errdefs.ErrInvalidImage, "end-of-stream"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkVMDKBytes(c.b)
			require.ErrorIs(t, err, c.want)
			assert.Contains(t, err.Error(), c.msg)
			t.Logf("%v", err)
		})
	}
}

// qemu-img converts a vmdk cut inside its last grain "successfully", with
// zeros where data was; CheckVMDK must refuse every such cut.
func TestCheckVMDKTruncatedInLastGrain(t *testing.T) {
	for _, sub := range []string{"monolithicSparse", "streamOptimized"} {
		t.Run(sub, func(t *testing.T) {
			b := realVMDK(t, sub)
			for _, cut := range []int{512, 1024, 4096, 40 << 10} {
				short := b[:len(b)-cut]
				err := checkVMDKBytes(short)
				require.ErrorIs(t, err, errdefs.ErrInvalidImage, "cut %d bytes", cut)
				assert.Contains(t, err.Error(), "past the end")
				if cut == 4096 {
					logQemuConvert(t, short)
				}
			}
		})
	}
}

// logQemuConvert records what qemu-img itself makes of an image: the
// reason for our own check.
func logQemuConvert(t *testing.T, b []byte) {
	dir := t.TempDir()
	p := filepath.Join(dir, "cut.vmdk")
	require.NoError(t, os.WriteFile(p, b, 0o644))
	out, err := exec.Command("qemu-img", "convert", "-f", "vmdk", "-O", "raw", p, p+".raw").CombinedOutput()
	t.Logf("qemu-img convert of the cut file: err=%v %s", err, out)
}

// A grain directory whose tables all point at the same grain is refused
// (the grains overlap) instead of being walked entry by entry.
func TestCheckVMDKOverlappingGrains(t *testing.T) {
	needTool(t, "qemu-img")
	dir, raw := variedRaw(t, 64<<10, 78)
	require.NoError(t, os.Truncate(raw, 256<<20)) // the rest a hole
	p := convert(t, raw, dir, "disk.vmdk", "vmdk")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, checkVMDKBytes(b))
	le := binary.LittleEndian
	gd := le.Uint64(b[56:]) * 512
	gt0 := le.Uint32(b[gd:])
	grain := le.Uint32(b[uint64(gt0)*512:])
	require.NotZero(t, grain)
	for i := 0; i < 8; i++ { // 256 MiB: 8 grain tables of 512 grains
		le.PutUint32(b[gd+uint64(i)*4:], gt0)
	}
	for j := 0; j < 512; j++ {
		le.PutUint32(b[uint64(gt0)*512+uint64(j)*4:], grain)
	}
	err = checkVMDKBytes(b)
	require.ErrorIs(t, err, errdefs.ErrInvalidImage)
	assert.Contains(t, err.Error(), "overlap")
}

// FuzzCheckVMDK: any bytes after a real header end in a verdict, never a
// panic or a hang.
func FuzzCheckVMDK(f *testing.F) {
	for _, sub := range []string{"monolithicSparse", "streamOptimized"} {
		dir, raw := variedRaw(f, 256<<10, 79)
		p := convert(f, raw, dir, sub+".vmdk", "vmdk", "subformat="+sub)
		b, err := os.ReadFile(p)
		require.NoError(f, err)
		f.Add(b, uint32(0), uint64(0))
	}
	f.Fuzz(func(t *testing.T, b []byte, at uint32, v uint64) {
		if len(b) >= 8 {
			i := int(at) % (len(b) - 7)
			binary.LittleEndian.PutUint64(b[i:], v)
		}
		_ = checkVMDKBytes(b)
	})
}

// selfDescriptor is what qemu-img writes into a monolithicSparse vmdk.
const selfDescriptor = "# Disk DescriptorFile\nversion=1\nCID=12345678\nparentCID=ffffffff\ncreateType=\"monolithicSparse\"\n\n" +
	"# Extent description\nRW 2048 SPARSE \"my disk.vmdk\"\n\n# The Disk Data Base\n#DDB\n\nddb.virtualHWVersion = \"4\"\nddb.adapterType = \"ide\"\n"

func TestVMDKDescriptorAcceptsSelfContained(t *testing.T) {
	ct, err := checkVMDKDescriptor([]byte(selfDescriptor))
	require.NoError(t, err)
	assert.Equal(t, "monolithicSparse", ct)

	// VMware's streamOptimized descriptors say RDONLY, with CRLF lines.
	vmware := "# Disk DescriptorFile\r\nversion=1\r\nCID=278f54ff\r\nparentCID=ffffffff\r\ncreateType=\"streamOptimized\"\r\n\r\n" +
		"# Extent description\r\nRDONLY 1048576 SPARSE \"generated-stream.vmdk\"\r\n\r\n#DDB\r\nddb.toolsVersion = \"6532\"\r\n"
	ct, err = checkVMDKDescriptor([]byte(vmware))
	require.NoError(t, err)
	assert.Equal(t, "streamOptimized", ct)
}

// Each of these makes qemu (or a careless reader) see something other than
// a single self-contained sparse file.
func TestVMDKDescriptorHostileRefused(t *testing.T) {
	const ct = "createType=\"monolithicSparse\"\n"
	const self = "RW 2048 SPARSE \"v.vmdk\"\n"
	for name, d := range map[string]string{
		"flat extent to an absolute path": "createType=\"monolithicFlat\"\nRW 2048 FLAT \"/etc/shadow\" 0\n",
		"flat extent to a device":         ct + "RW 2048 FLAT \"/dev/sda\" 0\n",
		"flat extent, relative":           ct + "RW 2048 FLAT \"v-flat.vmdk\" 0\n",
		"createType twice, first in a comment": "# createType=\"monolithicFlat\"\n" + ct +
			"RW\t2048\tFLAT\t\"/etc/shadow\"\t0\n" + self,
		"createType only in a comment":                      "# createType=\"monolithicSparse\"\n" + self,
		"createType in a value":                             "ddb.comment = \"createType=\\\"monolithicFlat\\\"\"\n" + ct + self,
		"createType with spaces (qemu reads another value)": "createType = \"monolithicSparse\"\n" + self,
		"createType lower case":                             "createtype=\"monolithicSparse\"\n" + self,
		"tab-separated flat extent":                         ct + self + "RW\t2048\tFLAT\t\"/etc/shadow\"\t0\n",
		"tab-separated sparse extent":                       ct + "RW\t2048\tSPARSE\t\"v.vmdk\"\n",
		"double spaces":                                     ct + "RW  2048 SPARSE \"v.vmdk\"\n",
		"RDONLY sparse naming another path":                 ct + "RDONLY 2048 SPARSE \"/var/lib/other.vmdk\"\n",
		"RDONLY next to the own extent":                     ct + self + "RDONLY 2048 SPARSE \"other.vmdk\"\n",
		"NOACCESS":                                          ct + "NOACCESS 2048 SPARSE \"v.vmdk\"\n",
		"lower-case rw flat":                                ct + self + "rw 2048 FLAT \"/etc/shadow\" 0\n",
		"vmfs":                                              ct + "RW 2048 VMFS \"/dev/sda\"\n",
		"sesparse":                                          ct + "RW 2048 SESPARSE \"x.vmdk\"\n",
		"zero extent":                                       ct + "RW 2048 ZERO\n",
		"extent split across lines":                         ct + "RW 2048\nFLAT \"/etc/shadow\" 0\n" + self,
		"vertical tab separator":                            ct + "RW\v2048\vFLAT \"/etc/shadow\" 0\n" + self,
		"carriage return inside a line":                     ct + "x\rRW 2048 FLAT \"/etc/shadow\" 0\n" + self,
		"parent hint in a comment":                          "# parentFileNameHint=\"/etc/shadow\"\n" + ct + self,
		"parent CID":                                        "parentCID=1234abcd\n" + ct + self,
		"unrecognised line":                                 ct + self + "what is this\n",
		"trailing offset":                                   ct + "RW 2048 SPARSE \"v.vmdk\" 0\n",
		"two extents":                                       ct + self + self,
		"no extent":                                         ct,
		"split sparse":                                      "createType=\"twoGbMaxExtentSparse\"\n" + self,
	} {
		_, err := checkVMDKDescriptor([]byte(d))
		require.ErrorIs(t, err, errdefs.ErrUnsafeImage, name)
		t.Logf("%s: %v", name, err)
	}
}

// The descriptor's text is what qemu reads from the header's descriptor
// offset to the first NUL: it must end inside its sectors.
func TestVMDKEmbeddedDescriptorBounds(t *testing.T) {
	head := make([]byte, 8<<10)
	sh := vmdkSparseHeader{descOffset: 1, descSize: 2}
	copy(head[512:], selfDescriptor)
	desc, err := embeddedVMDKDescriptor(head, sh)
	require.NoError(t, err)
	assert.Equal(t, selfDescriptor, string(desc))

	full := make([]byte, 8<<10)
	copy(full[512:], strings.Repeat("#", 1024)) // no NUL in its two sectors
	_, err = embeddedVMDKDescriptor(full, sh)
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)

	_, err = embeddedVMDKDescriptor(head[:1000], sh) // file ends inside it
	require.ErrorIs(t, err, errdefs.ErrInvalidImage)
}

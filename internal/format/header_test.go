package format

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
)

func TestSniffTinyAndMagic(t *testing.T) {
	for _, n := range []int{0, 1, 10, 300} {
		c, f := Sniff(make([]byte, n))
		assert.Equal(t, None, c)
		assert.Equal(t, Raw, f, "len %d", n)
	}
	cases := map[string]struct {
		head []byte
		c    Compression
		f    Format
	}{
		"gzip":  {[]byte{0x1f, 0x8b, 8}, Gzip, ""},
		"xz":    {[]byte{0xfd, '7', 'z', 'X', 'Z', 0}, XZ, ""},
		"zstd":  {[]byte{0x28, 0xb5, 0x2f, 0xfd}, Zstd, ""},
		"qcow2": {[]byte("QFI\xfb"), None, QCOW2},
		"vmdk":  {[]byte("KDMV"), None, VMDK},
		"desc":  {[]byte("# Disk DescriptorFile\nversion=1\n"), None, VMDKDescriptor},
		"vhdx":  {[]byte("vhdxfile"), None, VHDX},
		"vhd":   {[]byte("conectix"), None, VHD},
		"short": {[]byte{0x28, 0xb5, 0x2f}, None, Raw},
	}
	for name, tc := range cases {
		c, f := Sniff(tc.head)
		assert.Equal(t, tc.c, c, name)
		assert.Equal(t, tc.f, f, name)
	}
	vdi := make([]byte, 0x44)
	binary.LittleEndian.PutUint32(vdi[0x40:], 0xbeda107f)
	_, f := Sniff(vdi)
	assert.Equal(t, VDI, f)
	iso := make([]byte, 0x8006)
	copy(iso[0x8001:], "CD001")
	_, f = Sniff(iso)
	assert.Equal(t, ISO, f)
	_, f = Sniff(iso[:0x8005]) // one byte short of the magic
	assert.Equal(t, Raw, f)
}

func TestFormatNames(t *testing.T) {
	assert.Equal(t, "vpc", VHD.QemuName())
	assert.Equal(t, "raw", ISO.QemuName())
	assert.Equal(t, "qcow2", QCOW2.QemuName())
	assert.Equal(t, "vmdk", VMDK.QemuName())
	assert.False(t, Raw.NeedsConversion())
	assert.False(t, ISO.NeedsConversion())
	for _, f := range []Format{QCOW2, VMDK, VHD, VHDX, VDI} {
		assert.True(t, f.NeedsConversion(), f)
	}
}

// A format is named with the subtype that decides how it is read.
func TestDescribeNamesTheSubtype(t *testing.T) {
	assert.Equal(t, "streamOptimized vmdk", Describe(VMDK, Header{VMDKCreateType: " streamOptimized "}))
	assert.Equal(t, "vmdk", Describe(VMDK, Header{}))
	assert.Equal(t, "vhd (disk type 3)", Describe(VHD, Header{VHDDiskType: 3}))
	assert.Equal(t, "vdi (image type 2)", Describe(VDI, Header{VDIImageType: 2}))
	assert.Equal(t, "qcow2", Describe(QCOW2, Header{VMDKCreateType: "ignored"}))
}

// TestQemuImages makes every format with qemu-img from one raw file and
// checks Sniff, ParseHeader and the virtual size against qemu-img info.
func TestQemuImages(t *testing.T) {
	needTool(t, "qemu-img")
	dir := t.TempDir()
	raw := filepath.Join(dir, "disk.raw")
	// An odd size (not a multiple of the VHD CHS geometry) on purpose.
	writeRaw(t, raw, variedContent(5<<20+3<<16, 1))
	cases := []struct {
		name, qfmt string
		opts       []string
		f          Format
		sizeKnown  bool
	}{
		{"v3.qcow2", "qcow2", nil, QCOW2, true},
		{"v2.qcow2", "qcow2", []string{"compat=0.10"}, QCOW2, true},
		{"c512.qcow2", "qcow2", []string{"cluster_size=512"}, QCOW2, true},
		{"c2m.qcow2", "qcow2", []string{"cluster_size=2M"}, QCOW2, true},
		{"el2.qcow2", "qcow2", []string{"extended_l2=on"}, QCOW2, true},
		{"zstd.qcow2", "qcow2", []string{"compression_type=zstd"}, QCOW2, true},
		{"sparse.vmdk", "vmdk", []string{"subformat=monolithicSparse"}, VMDK, true},
		{"stream.vmdk", "vmdk", []string{"subformat=streamOptimized"}, VMDK, true},
		{"dyn.vhd", "vpc", []string{"subformat=dynamic"}, VHD, true},
		{"dynforce.vhd", "vpc", []string{"subformat=dynamic", "force_size=on"}, VHD, true},
		{"disk.vhdx", "vhdx", nil, VHDX, false},
		{"disk.vdi", "vdi", nil, VDI, true},
		{"fixed.vdi", "vdi", []string{"static=on"}, VDI, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := convert(t, raw, dir, tc.name, tc.qfmt, tc.opts...)
			head := readHead(t, p)
			c, f := Sniff(head)
			require.Equal(t, None, c)
			require.Equal(t, tc.f, f)
			h, err := ParseHeader(f, head)
			require.NoError(t, err)
			assert.Equal(t, tc.f, h.Format)
			if tc.sizeKnown {
				assert.Equal(t, qemuVirtualSize(t, p, tc.qfmt), h.VirtualSize)
			} else {
				assert.Equal(t, int64(-1), h.VirtualSize)
			}
			if f == QCOW2 {
				st, err := os.Stat(p)
				require.NoError(t, err)
				fh, err := os.Open(p)
				require.NoError(t, err)
				defer fh.Close()
				require.NoError(t, CheckQCOW2(fh, st.Size()))
			}
			// Every prefix of the head is refused cleanly or accepted:
			// never a panic.
			for n := 0; n < min(len(head), 2048); n += 7 {
				_, _ = ParseHeader(f, head[:n])
			}
		})
	}
}

func TestQCOW2Limits(t *testing.T) {
	needTool(t, "qemu-img")
	dir := t.TempDir()
	p := filepath.Join(dir, "big.qcow2")
	run(t, "qemu-img", "create", "-f", "qcow2", p, "2T")
	head := readHead(t, p)
	h, err := ParseHeader(QCOW2, head)
	require.NoError(t, err)
	assert.Equal(t, int64(2<<40), h.VirtualSize)
	assert.Equal(t, uint32(16), h.ClusterBits)
	_, err = ParseHeaderMax(QCOW2, head, 1<<40)
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)

	mut := func(fn func(b []byte)) []byte {
		b := append([]byte(nil), head...)
		fn(b)
		return b
	}
	be := binary.BigEndian
	for name, tc := range map[string]struct {
		b    []byte
		want error
	}{
		"cluster_bits 8":  {mut(func(b []byte) { be.PutUint32(b[20:], 8) }), errdefs.ErrUnsafeImage},
		"cluster_bits 22": {mut(func(b []byte) { be.PutUint32(b[20:], 22) }), errdefs.ErrUnsafeImage},
		"l1 too big":      {mut(func(b []byte) { be.PutUint32(b[36:], be.Uint32(b[36:])+1) }), errdefs.ErrUnsafeImage},
		"l1 too small":    {mut(func(b []byte) { be.PutUint32(b[36:], be.Uint32(b[36:])-1) }), errdefs.ErrInvalidImage},
		"size 100T":       {mut(func(b []byte) { be.PutUint64(b[24:], 100<<40) }), errdefs.ErrInvalidImage},
		"backing":         {mut(func(b []byte) { be.PutUint64(b[8:], 0x200) }), errdefs.ErrUnsafeImage},
		"data file bit":   {mut(func(b []byte) { b[79] |= 4 }), errdefs.ErrUnsafeImage},
		"corrupt bit":     {mut(func(b []byte) { b[79] |= 2 }), errdefs.ErrInvalidImage},
		"unknown feature": {mut(func(b []byte) { b[79] |= 0x80 }), errdefs.ErrUnsupportedFormat},
		"encrypted":       {mut(func(b []byte) { be.PutUint32(b[32:], 1) }), errdefs.ErrUnsupportedFormat},
		"version 4":       {mut(func(b []byte) { be.PutUint32(b[4:], 4) }), errdefs.ErrUnsupportedFormat},
		"truncated":       {head[:50], errdefs.ErrInvalidImage},
		"truncated v3":    {head[:90], errdefs.ErrInvalidImage},
	} {
		_, err := ParseHeader(QCOW2, tc.b)
		require.ErrorIs(t, err, tc.want, name)
	}
	// A header extension naming a data file, without the feature bit.
	ext := mut(func(b []byte) {
		hl := be.Uint32(b[100:])
		be.PutUint32(b[hl:], 0x44415441)
		be.PutUint32(b[hl+4:], 4)
		copy(b[hl+8:], "x.rw")
		be.PutUint32(b[hl+16:], 0)
	})
	_, err = ParseHeader(QCOW2, ext)
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
}

func TestQCOW2BackingAndDataFileRefused(t *testing.T) {
	needTool(t, "qemu-img")
	dir := t.TempDir()
	base := filepath.Join(dir, "base.qcow2")
	run(t, "qemu-img", "create", "-f", "qcow2", base, "1M")
	child := filepath.Join(dir, "child.qcow2")
	run(t, "qemu-img", "create", "-f", "qcow2", "-b", base, "-F", "qcow2", child)
	_, err := ParseHeader(QCOW2, readHead(t, child))
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
	require.ErrorContains(t, err, "backing file "+strconv.Quote(base)+" (flatten it first", "the backing file is named by its path")

	withData := filepath.Join(dir, "data.qcow2")
	run(t, "qemu-img", "create", "-f", "qcow2", "-o", "data_file="+filepath.Join(dir, "data.raw"), withData, "1M")
	_, err = ParseHeader(QCOW2, readHead(t, withData))
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
	require.ErrorContains(t, err, "data file")
}

func TestVMDKUnsafeRefused(t *testing.T) {
	needTool(t, "qemu-img")
	dir := t.TempDir()
	// monolithicFlat: a text descriptor naming a -flat extent file.
	flat := filepath.Join(dir, "flat.vmdk")
	run(t, "qemu-img", "create", "-f", "vmdk", "-o", "subformat=monolithicFlat", flat, "1M")
	head := readHead(t, flat)
	_, f := Sniff(head)
	require.Equal(t, VMDKDescriptor, f)
	_, err := ParseHeader(f, head)
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)

	// A sparse vmdk with a parent.
	base := filepath.Join(dir, "base.vmdk")
	run(t, "qemu-img", "create", "-f", "vmdk", base, "1M")
	child := filepath.Join(dir, "child.vmdk")
	run(t, "qemu-img", "create", "-f", "vmdk", "-b", base, "-F", "vmdk", child)
	head = readHead(t, child)
	_, f = Sniff(head)
	require.Equal(t, VMDK, f)
	_, err = ParseHeader(f, head)
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
	require.ErrorContains(t, err, "parent")

	// twoGbMaxExtentSparse: the first file is a descriptor too.
	split := filepath.Join(dir, "split.vmdk")
	run(t, "qemu-img", "create", "-f", "vmdk", "-o", "subformat=twoGbMaxExtentSparse", split, "1M")
	head = readHead(t, split)
	_, f = Sniff(head)
	_, err = ParseHeader(f, head)
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
}

func TestVMDKDescriptorExtents(t *testing.T) {
	good := "# Disk DescriptorFile\nversion=1\nCID=12345678\nparentCID=ffffffff\ncreateType=\"monolithicSparse\"\n\n# Extent description\nRW 2048 SPARSE \"my disk.vmdk\"\n"
	ct, err := checkVMDKDescriptor([]byte(good))
	require.NoError(t, err)
	assert.Equal(t, "monolithicSparse", ct)
	for name, d := range map[string]string{
		"two extents": good + "RW 2048 SPARSE \"other.vmdk\"\n",
		"flat extent": "createType=\"monolithicSparse\"\nRW 2048 FLAT \"x-flat.vmdk\" 0\n",
		"offset":      "createType=\"monolithicSparse\"\nRW 2048 SPARSE \"x.vmdk\" 0\n",
		"hint":        good + "parentFileNameHint=\"base.vmdk\"\n",
		"parentCID":   "parentCID=1234abcd\n" + good,
		"vmfs":        "createType=\"vmfsSparse\"\nRW 2048 SPARSE \"x.vmdk\"\n",
		"no extent":   "createType=\"monolithicSparse\"\n",
	} {
		_, err := checkVMDKDescriptor([]byte(d))
		require.ErrorIs(t, err, errdefs.ErrUnsafeImage, name)
	}
}

func TestFixedVHDFooter(t *testing.T) {
	needTool(t, "qemu-img")
	dir := t.TempDir()
	raw := filepath.Join(dir, "disk.raw")
	content := variedContent(3<<20, 2)
	writeRaw(t, raw, content)
	p := convert(t, raw, dir, "fixed.vhd", "vpc", "subformat=fixed")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	head := b[:DefaultPeekSize]
	c, f := Sniff(head)
	require.Equal(t, None, c)
	require.Equal(t, Raw, f, "a fixed vhd starts with raw data")
	dataLen := int64(len(b) - 512)
	tail := b[dataLen:]
	assert.True(t, IsFixedVHDFooter(tail, dataLen))
	assert.Equal(t, qemuVirtualSize(t, p, "vpc"), dataLen)
	assert.Equal(t, sha(content), sha(b[:len(content)]), "data precedes the footer unchanged")
	assert.False(t, IsFixedVHDFooter(tail, dataLen-512))
	assert.False(t, IsFixedVHDFooter(tail[:511], dataLen))
	bad := append([]byte(nil), tail...)
	bad[100] ^= 1
	assert.False(t, IsFixedVHDFooter(bad, dataLen), "checksum must be verified")
	// The dynamic vhd's footer copy is not a fixed footer.
	dyn := convert(t, raw, dir, "dyn.vhd", "vpc", "subformat=dynamic")
	db, err := os.ReadFile(dyn)
	require.NoError(t, err)
	assert.False(t, IsFixedVHDFooter(db[len(db)-512:], int64(len(db)-512)))
	assert.False(t, IsFixedVHDFooter(make([]byte, 512), 0))
	footer, err := CheckRawEnd(tail, dataLen)
	require.NoError(t, err)
	assert.True(t, footer, "a fixed VHD's footer is left out of the disk")
	footer, err = CheckRawEnd(b[len(b)-1024:len(b)-512], dataLen-512)
	require.NoError(t, err)
	assert.False(t, footer, "data is data")
	n, err := RawDiskSize(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err)
	assert.Equal(t, dataLen, n, "the disk of a fixed VHD ends before its footer")
	n, err = RawDiskSize(bytes.NewReader(b[:dataLen]), dataLen)
	require.NoError(t, err)
	assert.Equal(t, dataLen, n, "a raw image is all disk")
}

func TestVHDVDIRefusals(t *testing.T) {
	needTool(t, "qemu-img")
	dir := t.TempDir()
	base := filepath.Join(dir, "base.vhd")
	run(t, "qemu-img", "create", "-f", "vpc", base, "1M")
	head := readHead(t, base)
	_, err := ParseHeader(VHD, head)
	require.NoError(t, err)
	// Turn it into a differencing disk (type 4) with a valid checksum.
	diff := append([]byte(nil), head...)
	binary.BigEndian.PutUint32(diff[60:], 4)
	binary.BigEndian.PutUint32(diff[64:], vhdChecksum(diff[:512], 64))
	_, err = ParseHeader(VHD, diff)
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
	bad := append([]byte(nil), head...)
	bad[40] ^= 1
	_, err = ParseHeader(VHD, bad)
	require.ErrorIs(t, err, errdefs.ErrInvalidImage)
	_, err = ParseHeader(VHD, head[:700])
	require.ErrorIs(t, err, errdefs.ErrInvalidImage)

	vdi := filepath.Join(dir, "d.vdi")
	run(t, "qemu-img", "create", "-f", "vdi", vdi, "1M")
	head = readHead(t, vdi)
	_, err = ParseHeader(VDI, head)
	require.NoError(t, err)
	d := append([]byte(nil), head...)
	binary.LittleEndian.PutUint32(d[0x4c:], 4)
	_, err = ParseHeader(VDI, d)
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
	_, err = ParseHeader(VDI, head[:0x100])
	require.ErrorIs(t, err, errdefs.ErrInvalidImage)
}

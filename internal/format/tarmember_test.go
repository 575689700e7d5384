package format

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/testtar"
)

const ovf = `<?xml version="1.0" encoding="UTF-8"?>
<Envelope xmlns="http://schemas.dmtf.org/ovf/envelope/1"><References><File ovf:href="disk1.vmdk" ovf:id="file1"/></References></Envelope>
`

func TestTarOfOneDiskOpensTheDisk(t *testing.T) {
	disk := variedContent(2<<20, 11)
	rawPath := writeTemp(t, disk)
	vmdk := readFile(t, convert(t, rawPath, t.TempDir(), "disk1.vmdk", "vmdk", "subformat=streamOptimized"))
	qcow := readFile(t, convert(t, rawPath, t.TempDir(), "disk.qcow2", "qcow2"))

	cases := []struct {
		name    string
		archive []byte
		format  Format
		layers  []Compression
		member  string
		// rawSize: the size of a raw disk read straight from the member
		rawSize int64
	}{
		{"GCE disk.raw in a tar.gz", gzipBytes(t, testtar.Build(t, []testtar.Member{testtar.File("disk.raw", disk)})),
			Raw, []Compression{Gzip, Tar}, "disk.raw", int64(len(disk))},
		{"OVA with one vmdk", testtar.Build(t, []testtar.Member{
			testtar.File("vm.ovf", []byte(ovf)), testtar.File("disk1.vmdk", vmdk), testtar.File("vm.mf", []byte("SHA256(disk1.vmdk)= 00\n")), testtar.File("vm.nvram", disk[:8192])}),
			VMDK, []Compression{Tar}, "disk1.vmdk", 0},
		{"a qcow2 among text files and directories", testtar.Build(t, []testtar.Member{
			{Name: "images/", Type: tar.TypeDir}, testtar.File("README", []byte("the image\n")), testtar.File("images/fs.2wocq", qcow), testtar.File("images/empty", nil)}),
			QCOW2, []Compression{Tar}, "images/fs.2wocq", 0},
		{"a compressed disk in a tar", testtar.Build(t, []testtar.Member{testtar.File("disk.raw.gz", gzipBytes(t, disk))}),
			Raw, []Compression{Tar, Gzip}, "disk.raw.gz", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, got, err := openBytes(t, c.archive)
			require.NoError(t, err)
			assert.Equal(t, c.format, s.Format)
			assert.Equal(t, c.layers, s.Compressions)
			assert.Equal(t, c.member, s.Member)
			assert.Equal(t, c.rawSize, s.RawMemberSize())
			want := map[Format][]byte{Raw: disk, VMDK: vmdk, QCOW2: qcow}[c.format]
			assert.Equal(t, sha(want), sha(got), "the member's bytes")
		})
	}
}

// GCE's own recipe makes the tar with GNU tar's old sparse format
// (tar --format=oldgnu -Sczf): its holes read back as zeros.
func TestGNUSparseTarMember(t *testing.T) {
	needTool(t, "tar")
	dir := t.TempDir()
	disk := variedContent(4<<20, 12) // zero 64 KiB blocks among data
	f, err := os.Create(filepath.Join(dir, "disk.raw"))
	require.NoError(t, err)
	for off := 0; off < len(disk); off += 64 << 10 {
		blk := disk[off : off+64<<10]
		if bytes.Count(blk, []byte{0}) != len(blk) {
			_, err = f.WriteAt(blk, int64(off))
			require.NoError(t, err)
		}
	}
	require.NoError(t, f.Truncate(int64(len(disk))))
	require.NoError(t, f.Close())
	run(t, "tar", "--format=oldgnu", "-S", "-czf", filepath.Join(dir, "image.tar.gz"), "-C", dir, "disk.raw")
	s, got, err := openBytes(t, readFile(t, filepath.Join(dir, "image.tar.gz")))
	require.NoError(t, err)
	assert.Equal(t, []Compression{Gzip, Tar}, s.Compressions)
	assert.Equal(t, sha(disk), sha(got))
}

func TestTarWithoutOneDiskRefused(t *testing.T) {
	disk := variedContent(1<<20, 13)
	other := variedContent(1<<20, 14)

	// None: refused when opened, with the names found.
	_, _, err := openBytes(t, testtar.Build(t, []testtar.Member{
		testtar.File("notes.txt", []byte("hello\n")), {Name: "d/", Type: tar.TypeDir}, testtar.File("vm.ovf", []byte(ovf))}))
	require.ErrorIs(t, err, errdefs.ErrNoDiskInArchive)
	require.ErrorIs(t, err, errdefs.ErrUnsupportedFormat)
	assert.Contains(t, err.Error(), "a tar archive holding no disk image (it holds notes.txt, vm.ovf)")

	// Several: the second is met after the first was read; the read fails
	// instead of ending, naming both.
	_, _, err = openBytes(t, testtar.Build(t, []testtar.Member{
		testtar.File("vm.ovf", []byte(ovf)), testtar.File("disk1.vmdk", disk), testtar.File("disk2.vmdk", other)}))
	require.ErrorIs(t, err, errdefs.ErrSeveralDisksInArchive)
	assert.Contains(t, err.Error(), "more than one disk image (disk1.vmdk, disk2.vmdk)")

	// A container image layout is not a tar of a disk.
	_, _, err = openBytes(t, testtar.Build(t, []testtar.Member{
		{Name: "blobs/", Type: tar.TypeDir}, testtar.File("blobs/sha256/"+sha(disk), disk), testtar.File("index.json", []byte("{}"))}))
	require.ErrorIs(t, err, errdefs.ErrArchiveFile)
	assert.Contains(t, err.Error(), "oci-archive:")

	// A tar cut inside its member is truncated.
	whole := testtar.Build(t, []testtar.Member{testtar.File("disk.raw", disk), testtar.File("disk2.raw", other)})
	_, _, err = openBytes(t, whole[:len(disk)/2])
	require.ErrorIs(t, err, errdefs.ErrInvalidImage)
}

// The archive content type and a forced raw format keep the tar whole.
func TestTarKeptWhole(t *testing.T) {
	archive := testtar.Build(t, []testtar.Member{testtar.File("disk.raw", variedContent(1<<20, 15))})
	for _, o := range []Options{{WholeTar: true}, {ForceRaw: true}} {
		s, err := Open(context.Background(), bytes.NewReader(archive), o)
		require.NoError(t, err)
		got, err := io.ReadAll(s)
		require.NoError(t, err)
		assert.Empty(t, s.Compressions)
		assert.Equal(t, sha(archive), sha(got))
		s.Close()
	}
}

// ovfOf is an OVF descriptor whose DiskSection lists the given files, and
// which references one more, an ISO for the CD-ROM, that is not a disk.
func ovfOf(disks ...string) []byte {
	var refs, ds strings.Builder
	for i, d := range disks {
		fmt.Fprintf(&refs, "    <File ovf:href=%q ovf:id=\"file%d\"/>\n", d, i)
		fmt.Fprintf(&ds, "    <Disk ovf:diskId=\"vmdisk%d\" ovf:fileRef=\"file%d\" ovf:capacity=\"1\"/>\n", i, i)
	}
	return fmt.Appendf(nil, `<?xml version="1.0" encoding="UTF-8"?>
<Envelope xmlns="http://schemas.dmtf.org/ovf/envelope/1" xmlns:ovf="http://schemas.dmtf.org/ovf/envelope/1">
  <References>
%s    <File ovf:href="tools.iso" ovf:id="cdrom"/>
  </References>
  <DiskSection>
    <Info>Virtual disk information</Info>
%s  </DiskSection>
</Envelope>
`, refs.String(), ds.String())
}

// An OVA's descriptor says which members are its disks: the one it names
// is imported whatever else the tar holds (an ISO for the CD-ROM), and two
// are refused before either is read.
func TestOVADescriptorNamesTheDisk(t *testing.T) {
	disk := variedContent(1<<20, 16)
	iso := variedContent(1<<20, 17)
	s, got, err := openBytes(t, testtar.Build(t, []testtar.Member{
		testtar.File("vm.ovf", ovfOf("vm-disk1.vmdk")), testtar.File("tools.iso", iso), testtar.File("vm-disk1.vmdk", disk)}))
	require.NoError(t, err)
	assert.Equal(t, "vm-disk1.vmdk", s.Member)
	assert.Equal(t, sha(disk), sha(got))

	archive := testtar.Build(t, []testtar.Member{
		testtar.File("vm.ovf", ovfOf("vm-disk1.vmdk", "vm-disk2.vmdk")), testtar.File("vm-disk1.vmdk", disk), testtar.File("vm-disk2.vmdk", disk)})
	_, err = Open(context.Background(), bytes.NewReader(archive), Options{})
	require.ErrorIs(t, err, errdefs.ErrSeveralDisksInArchive, "refused when opened, not after reading a disk")
	assert.Contains(t, err.Error(), "vm.ovf lists vm-disk1.vmdk, vm-disk2.vmdk")

	// Named but absent: no disk.
	_, _, err = openBytes(t, testtar.Build(t, []testtar.Member{testtar.File("vm.ovf", ovfOf("gone.vmdk")), testtar.File("other.img", disk)}))
	require.ErrorIs(t, err, errdefs.ErrNoDiskInArchive)
}

// A POSIX, pax or GNU tar header is told by its ustar magic at offset
// 257; a head too short to hold it, or other bytes there, is not a tar.
func TestIsTarTellsATarHeader(t *testing.T) {
	for _, f := range []tar.Format{tar.FormatUSTAR, tar.FormatPAX, tar.FormatGNU} {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: "disk.raw", Mode: 0o644, Size: 0, Format: f}))
		require.NoError(t, tw.Close())
		assert.True(t, IsTar(b.Bytes()), "%v", f)
		assert.False(t, IsTar(b.Bytes()[:261]), "%v: a head cut inside the magic", f)
	}
	head := make([]byte, 512)
	assert.False(t, IsTar(head), "zeros (an archive's end) are no header")
	copy(head[257:], "ustaR")
	assert.False(t, IsTar(head))
}

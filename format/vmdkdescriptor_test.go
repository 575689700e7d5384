package format

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
)

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

package qemu

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
)

func TestParseInfoIgnoresUnknownFields(t *testing.T) {
	js := `{"virtual-size": 1048576, "filename": "a.vmdk", "cluster-size": 65536,
	  "format": "vmdk", "actual-size": 4096, "some-future-field": {"x": [1,2]},
	  "format-specific": {"type": "vmdk", "data": {"cid": 1, "create-type": "twoGbMaxExtentSparse",
	    "extents": [{"filename": "/d/a-s001.vmdk", "format": "SPARSE", "unknown": true},
	                {"filename": "/d/a-s002.vmdk"}]}},
	  "backing-filename": "base.img", "dirty-flag": false}`
	info, err := parseInfo([]byte(js))
	require.NoError(t, err)
	assert.Equal(t, &ImageInfo{Format: "vmdk", VirtualSize: 1 << 20, ActualSize: 4096, ClusterSize: 65536,
		BackingFilename: "base.img", ExtentFilenames: []string{"/d/a-s001.vmdk", "/d/a-s002.vmdk"}}, info)

	info, err = parseInfo([]byte(`{"format":"qcow2","virtual-size":5,"format-specific":{"type":"qcow2","data":{"corrupt":true,"data-file":"x"}}}`))
	require.NoError(t, err)
	assert.True(t, info.Corrupt)
	assert.Equal(t, "x", info.DataFile)

	_, err = parseInfo([]byte(`not json`))
	assert.Error(t, err)
}

// An image is self-contained when qemu-img info names no file but the
// image itself: not a backing file, a data file, an extent or a child node
// elsewhere; names relative to the image's directory and the NBD export's
// URIs are the image.
func TestCheckSelfContained(t *testing.T) {
	const img = "/scratch/disk.vmdk"
	const sock = "/tmp/importer-nbd-1/image.sock"
	local := []string{img}
	ranged := []string{`json:{"backing":null,"file":{"driver":"nbd","server":{"path":"` + sock + `","type":"unix"}}}`, "nbd+unix://?socket=" + sock, "nbd+unix:///?socket=" + sock}
	ok := map[string]struct {
		info *ImageInfo
		self []string
	}{
		"local monolithic":        {&ImageInfo{ExtentFilenames: []string{img}}, local},
		"local, relative extent":  {&ImageInfo{ExtentFilenames: []string{"disk.vmdk"}}, local},
		"qcow2, no extents":       {&ImageInfo{}, local},
		"file child":              {&ImageInfo{Children: []ChildInfo{{Name: "file", Filename: img}}}, local},
		"ranged: the NBD export":  {&ImageInfo{ExtentFilenames: []string{"nbd+unix://?socket=" + sock}}, ranged},
		"ranged: file child, nbd": {&ImageInfo{Children: []ChildInfo{{Name: "file", Filename: "nbd+unix://?socket=" + sock}}}, ranged},
	}
	for name, c := range ok {
		assert.NoError(t, c.info.CheckSelfContained(c.self...), name)
	}
	bad := map[string]struct {
		info *ImageInfo
		self []string
	}{
		"backing":                 {&ImageInfo{BackingFilename: "/etc/passwd"}, local},
		"data file":               {&ImageInfo{DataFile: "/dev/sda"}, local},
		"extent to a host file":   {&ImageInfo{ExtentFilenames: []string{"/etc/shadow"}}, local},
		"extent beside the image": {&ImageInfo{ExtentFilenames: []string{"disk-flat.vmdk"}}, local},
		"two extents":             {&ImageInfo{ExtentFilenames: []string{img, img}}, local},
		"extents child":           {&ImageInfo{Children: []ChildInfo{{Name: "file", Filename: img}, {Name: "extents.0", Filename: "/etc/shadow"}}}, local},
		"file child elsewhere":    {&ImageInfo{Children: []ChildInfo{{Name: "file", Filename: "/etc/shadow"}}}, local},
		"ranged: a host file":     {&ImageInfo{ExtentFilenames: []string{"/etc/shadow"}}, ranged},
		"ranged: a local path":    {&ImageInfo{ExtentFilenames: []string{sock}}, ranged},
		"ranged: another socket":  {&ImageInfo{ExtentFilenames: []string{"nbd+unix://?socket=/run/other.sock"}}, ranged},
	}
	for name, c := range bad {
		err := c.info.CheckSelfContained(c.self...)
		require.ErrorIs(t, err, errdefs.ErrUnsafeImage, name)
		t.Logf("%s: %v", name, err)
	}
}

package qemu

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

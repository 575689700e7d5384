package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// A Result marshals to the command line's --json: the same names and
// values for every field they share (durationSeconds, not nanoseconds in
// "Duration"), plus complete and target.
func TestResultMarshalsAsTheCLIsJSON(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 4<<20, 9)
	src := testimg.Compress(t, testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2"), "xz")
	res, err := importer.Import(context.Background(), importer.Options{Source: src, Target: filepath.Join(dir, "disk.img"),
		Checksums: []string{testimg.FileDigest(t, src)}, Logger: testimg.Logger(t)})
	require.NoError(t, err)

	b, err := json.Marshal(res)
	require.NoError(t, err)
	var lib, cli map[string]any
	require.NoError(t, json.Unmarshal(b, &lib))
	require.NoError(t, json.Unmarshal(cdi.CLIMessage(res, nil).JSON(), &cli))
	t.Logf("library: %s", b)
	assert.Equal(t, true, lib["complete"])
	assert.Equal(t, res.Target, lib["target"])
	assert.Equal(t, "qcow2", lib["sourceFormat"])
	assert.Equal(t, "xz", lib["compression"])
	assert.EqualValues(t, 4<<20, lib["virtualSize"])
	assert.NotContains(t, lib, "Duration")
	for k, v := range lib {
		if k == "complete" || k == "target" {
			continue
		}
		assert.Equal(t, cli[k], v, "field %s", k)
	}
	for _, k := range []string{"virtualSize", "bytesRead", "bytesWritten", "durationSeconds", "checksum", "contentDigest"} {
		assert.Contains(t, lib, k)
	}
}

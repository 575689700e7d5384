package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/cdi"
	"github.com/diskimport/engine/internal/objtest"
	"github.com/diskimport/engine/internal/testimg"
)

// TestCLIObjectStores: s3:// with --s3-endpoint and --creds, gs:// with
// --gcs-endpoint, and CDI's IMPORTER_SOURCE=s3/gcs with CDI's endpoint
// forms, each against a real server on loopback.
func TestCLIObjectStores(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", "")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 4<<20, 41)
	q := testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2")
	xz := testimg.Compress(t, q, "xz")
	data, err := os.ReadFile(xz)
	require.NoError(t, err)

	s := objtest.StartS3(t)
	s.MakeBucket(t, "bucket")
	s.Put(t, "bucket", "dir/disk.qcow2.xz", data)
	g := objtest.StartGCS(t, "bucket")
	g.Upload(t, "bucket", "dir/disk.qcow2.xz", data)

	for _, c := range []struct {
		name string
		args []string
	}{
		{"s3", []string{"--creds", s.Access + ":" + s.Secret, "--s3-endpoint", s.URL, "--s3-region", "us-east-1", "s3://bucket/dir/disk.qcow2.xz"}},
		{"gcs", []string{"--gcs-endpoint", g.URL, "gs://bucket/dir/disk.qcow2.xz"}},
	} {
		t.Run("cli "+c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "disk.img")
			code, _, _ := runCLI(t, nil, env(nil), append(append([]string{"--checksum", testimg.FileDigest(t, xz)}, c.args...), out)...)
			require.Equal(t, cdi.ExitOK, code)
			assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, out, -1))
		})
	}
	code, _, stderr := runCLI(t, nil, env(nil), "--creds", s.Access+":wrong", "--s3-endpoint", s.URL, "s3://bucket/dir/disk.qcow2.xz", filepath.Join(t.TempDir(), "disk.img"))
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "wrong credentials")

	for _, c := range []struct {
		name, source, endpoint string
	}{
		{"s3", "s3", s.URL + "/bucket/dir/disk.qcow2.xz"},
		// CDI's https://storage.googleapis.com/bucket/object form, here at the emulator.
		{"gcs", "gcs", g.URL + "/bucket/dir/disk.qcow2.xz"},
	} {
		t.Run("env "+c.name, func(t *testing.T) {
			root := cdiRoot(t)
			e := map[string]string{
				"IMPORTER_SOURCE": c.source, "IMPORTER_ENDPOINT": c.endpoint, "IMPORTER_CONTENTTYPE": "kubevirt",
				"IMPORTER_IMAGE_SIZE": "64Mi", "PREALLOCATION": "false", "IMPORTER_PATH_PREFIX": root,
			}
			if c.source == "s3" {
				e["IMPORTER_ACCESS_KEY_ID"], e["IMPORTER_SECRET_KEY"] = s.Access, s.Secret
			}
			code, _, stderr := runCLI(t, nil, env(e))
			require.Equal(t, cdi.ExitOK, code)
			// A qcow2.xz object is decoded straight onto the volume.
			assert.Contains(t, stderr, "New phase: TransferDataFile")
			assert.NotContains(t, stderr, "New phase: TransferScratch")
			b, err := os.ReadFile(filepath.Join(root, "dev/termination-log"))
			require.NoError(t, err)
			assert.Equal(t, "Import Complete", decode(t, b).Message)
			assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, filepath.Join(root, "data/disk.img"), 4<<20))
		})
	}
}

package cdi

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
)

func TestReadEnvS3AndGCSEndpoints(t *testing.T) {
	p := podPaths(t, false)
	for _, c := range []struct{ source, endpoint, want string }{
		{"s3", "https://s3.us-west-2.amazonaws.com/bucket/dir/disk.qcow2", "s3+https://s3.us-west-2.amazonaws.com/bucket/dir/disk.qcow2"},
		{"s3", "http://minio.local:9000/bucket/disk.img", "s3+http://minio.local:9000/bucket/disk.img"},
		{"s3", "s3://bucket/disk.img", "s3://bucket/disk.img"},
		{"gcs", "gs://bucket/disk.img", "gs://bucket/disk.img"},
		{"gcs", "https://storage.googleapis.com/bucket/disk.img", "gs+https://storage.googleapis.com/bucket/disk.img"},
	} {
		req, err := ReadEnv(envOf(map[string]string{
			"IMPORTER_SOURCE": c.source, "IMPORTER_ENDPOINT": c.endpoint,
			"IMPORTER_ACCESS_KEY_ID": "AKID", "IMPORTER_SECRET_KEY": "SECRET", "IMPORTER_CERT_DIR": "/certs",
		}), p)
		require.NoError(t, err, c.endpoint)
		assert.Equal(t, c.want, req.Import.Source)
		assert.Equal(t, "AKID", req.Import.Username)
		assert.Equal(t, "SECRET", req.Import.Password)
		assert.Equal(t, "/certs", req.Import.CertDir)
		req.Close()
	}
	for _, c := range []struct{ source, endpoint string }{
		{"s3", "gs://bucket/disk.img"},
		{"gcs", "s3://bucket/disk.img"},
		{"s3", "/data/disk.img"},
		{"s3", "ftp://user:pw@host/b/k"},
	} {
		_, err := ReadEnv(envOf(map[string]string{"IMPORTER_SOURCE": c.source, "IMPORTER_ENDPOINT": c.endpoint}), p)
		require.ErrorIs(t, err, errdefs.ErrInvalidOptions, c.endpoint)
		assert.NotContains(t, err.Error(), "pw@")
	}
}

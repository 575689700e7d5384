package cdi

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// podPaths returns the paths of a pod rooted in a temp dir, with a block
// device when block is set (any file stands for it: only its presence is
// looked at).
func podPaths(t *testing.T, block bool) Paths {
	root := t.TempDir()
	p := PathsFromEnv(envOf(map[string]string{"IMPORTER_PATH_PREFIX": root}))
	if block {
		require.NoError(t, os.MkdirAll(filepath.Dir(p.BlockDevice), 0o755))
		require.NoError(t, os.WriteFile(p.BlockDevice, nil, 0o600))
	}
	return p
}

func TestPathsFromEnvPrefix(t *testing.T) {
	assert.Equal(t, Paths{
		BlockDevice: "/dev/cdi-block-volume", DataDir: "/data", DataFile: "/data/disk.img",
		Scratch: "/scratch", TerminationLog: "/dev/termination-log",
		ExtraHeaders: "/extraheaders", ProxyCerts: "/proxycerts",
		ServiceAccount: "/var/run/secrets/kubernetes.io/serviceaccount",
	}, PathsFromEnv(envOf(nil)))
	assert.Equal(t, "/p/data/disk.img", PathsFromEnv(envOf(map[string]string{"IMPORTER_PATH_PREFIX": "/p"})).DataFile)
}

func TestReadEnvHTTP(t *testing.T) {
	p := podPaths(t, false)
	req, err := ReadEnv(envOf(map[string]string{
		"IMPORTER_SOURCE":         "http",
		"IMPORTER_ENDPOINT":       "https://example.org/disk.qcow2",
		"IMPORTER_IMAGE_SIZE":     "1Gi",
		"IMPORTER_ACCESS_KEY_ID":  "user",
		"IMPORTER_SECRET_KEY":     "secret",
		"IMPORTER_CERT_DIR":       "/certs",
		"INSECURE_TLS":            "true",
		"PREALLOCATION":           "true",
		"IMPORTER_CHECKSUM":       "sha256:00",
		"IMPORTER_CONTENT_DIGEST": "blk-sha256:11",
		"FILESYSTEM_OVERHEAD":     "0.055",
		"CACHE_MODE":              "TryNone",
		"IMPORTER_EXTRA_HEADER_0": "A: 1",
		"IMPORTER_EXTRA_HEADER_7": "B: 2",
		"IMPORTER_CONNECTIONS":    "3",
		"IMPORTER_MAX_SPILL":      "2Gi",
	}), p)
	require.NoError(t, err)
	assert.Equal(t, Import, req.Kind)
	assert.Equal(t, importer.Options{
		Source: "https://example.org/disk.qcow2", Target: p.DataFile, TargetOptions: importer.TargetOptions{
			NoScratch:           true,
			Size:                1 << 30,
			Preallocation:       true,
			FilesystemOverhead:  0.055,
			CacheMode:           "trynone",
			ExpectContentDigest: "blk-sha256:11",
			MaxSpill:            2 << 30,
		}, // no volume mounted at p.Scratch
		Access: datasource.Access{
			Username:    "user",
			Password:    "secret",
			CertDir:     "/certs",
			InsecureTLS: true,
			Headers:     []string{"A: 1", "B: 2"},
			Egress:      &importer.EgressPolicy{Deny: datasource.DefaultEgressDeny()},
			Connections: 3,
		},
		Checksums: []string{"sha256:00"},
	}, req.Import)
}

func TestReadEnvTargets(t *testing.T) {
	base := map[string]string{"IMPORTER_SOURCE": "http", "IMPORTER_ENDPOINT": "http://h/d", "FILESYSTEM_OVERHEAD": "0.1"}
	with := func(k, v string) map[string]string {
		m := map[string]string{k: v}
		for bk, bv := range base {
			m[bk] = bv
		}
		return m
	}

	p := podPaths(t, true)
	req, err := ReadEnv(envOf(base), p)
	require.NoError(t, err)
	assert.Equal(t, p.BlockDevice, req.Import.Target)
	assert.Zero(t, req.Import.FilesystemOverhead, "a device keeps no filesystem overhead")

	_, err = ReadEnv(envOf(with("IMPORTER_CONTENTTYPE", "archive")), p)
	assert.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	assert.ErrorContains(t, err, "needs a filesystem volume")

	p = podPaths(t, false)
	req, err = ReadEnv(envOf(with("IMPORTER_CONTENTTYPE", "archive")), p)
	require.NoError(t, err)
	assert.Equal(t, p.DataDir, req.Import.Target)
	assert.Equal(t, importer.ContentTypeArchive, req.Import.ContentType)
}

func TestReadEnvBlankAndUpload(t *testing.T) {
	p := podPaths(t, true)
	req, err := ReadEnv(envOf(map[string]string{
		"IMPORTER_SOURCE": "none", "IMPORTER_IMAGE_SIZE": "10M", "PREALLOCATION": "true", "FILESYSTEM_OVERHEAD": "0.1",
	}), p)
	require.NoError(t, err)
	assert.Equal(t, Blank, req.Kind)
	assert.Equal(t, importer.BlankOptions{Target: p.BlockDevice, Size: 10e6, Preallocation: true}, req.Blank)

	_, err = ReadEnv(envOf(map[string]string{"IMPORTER_SOURCE": "none", "IMPORTER_IMAGE_SIZE": "lots"}), p)
	assert.ErrorIs(t, err, errdefs.ErrInvalidOptions)

	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte(" s3cret\n"), 0o600))
	req, err = ReadEnv(envOf(map[string]string{
		"IMPORTER_SOURCE": "upload", "IMPORTER_UPLOAD_LISTEN": "127.0.0.1:0", "IMPORTER_UPLOAD_TOKEN_FILE": token,
	}), p)
	require.NoError(t, err)
	assert.Equal(t, Upload, req.Kind)
	assert.Equal(t, "-", req.Import.Source)
	assert.Equal(t, UploadConfig{Listen: "127.0.0.1:0", Token: "s3cret"}, req.Upload)

	req, err = ReadEnv(envOf(map[string]string{"IMPORTER_SOURCE": "upload", "TLS_CERT": "not PEM"}), p)
	assert.Equal(t, Upload, req.Kind, "the kind is known even when the rest is wrong")
	assert.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	assert.ErrorContains(t, err, "TLS_CERT/TLS_KEY")
}

func TestReadEnvRefuses(t *testing.T) {
	p := podPaths(t, false)
	for name, tc := range map[string]struct {
		env  map[string]string
		want string
	}{
		"no source":          {map[string]string{}, "Unknown data source"},
		"vddk":               {map[string]string{"IMPORTER_SOURCE": "vddk"}, "not supported by this importer (supported: http, s3, gcs, registry, clone, none and upload)"},
		"unknown":            {map[string]string{"IMPORTER_SOURCE": "ftp"}, `Unknown data source: "ftp" (supported: http, s3, gcs, registry, clone, none and upload)`},
		"blank archive":      {map[string]string{"IMPORTER_SOURCE": "none", "IMPORTER_CONTENTTYPE": "archive"}, "Cannot create empty disk with content type archive"},
		"min TLS version":    {map[string]string{"IMPORTER_SOURCE": "http", "IMPORTER_ENDPOINT": "http://h/d", "TLS_MIN_VERSION": "TLS1.2"}, "TLS_MIN_VERSION"},
		"no endpoint":        {map[string]string{"IMPORTER_SOURCE": "http"}, "IMPORTER_ENDPOINT is empty"},
		"file endpoint":      {map[string]string{"IMPORTER_SOURCE": "http", "IMPORTER_ENDPOINT": "/etc/passwd"}, "is a path"},
		"content type":       {map[string]string{"IMPORTER_SOURCE": "http", "IMPORTER_ENDPOINT": "http://h/d", "IMPORTER_CONTENTTYPE": "iso"}, "unknown IMPORTER_CONTENTTYPE"},
		"bool":               {map[string]string{"IMPORTER_SOURCE": "http", "IMPORTER_ENDPOINT": "http://h/d", "INSECURE_TLS": "yes please"}, "INSECURE_TLS"},
		"overhead":           {map[string]string{"IMPORTER_SOURCE": "http", "IMPORTER_ENDPOINT": "http://h/d", "FILESYSTEM_OVERHEAD": "6%"}, "FILESYSTEM_OVERHEAD"},
		"connections":        {map[string]string{"IMPORTER_SOURCE": "http", "IMPORTER_ENDPOINT": "http://h/d", "IMPORTER_CONNECTIONS": "many"}, "IMPORTER_CONNECTIONS"},
		"max spill":          {map[string]string{"IMPORTER_SOURCE": "http", "IMPORTER_ENDPOINT": "http://h/d", "IMPORTER_MAX_SPILL": "lots"}, "IMPORTER_MAX_SPILL"},
		"relative clone":     {map[string]string{"IMPORTER_SOURCE": "clone", "IMPORTER_ENDPOINT": "dev/sdb"}, "must be an absolute path"},
		"clone verify value": {map[string]string{"IMPORTER_SOURCE": "clone", "IMPORTER_ENDPOINT": "/dev/sdb", "IMPORTER_VERIFY": "maybe"}, "IMPORTER_VERIFY"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ReadEnv(envOf(tc.env), p)
			assert.ErrorIs(t, err, errdefs.ErrInvalidOptions)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

func TestReadEnvEgress(t *testing.T) {
	p := podPaths(t, false)
	read := func(extra map[string]string) (*importer.EgressPolicy, error) {
		m := map[string]string{"IMPORTER_SOURCE": "http", "IMPORTER_ENDPOINT": "http://h/d"}
		for k, v := range extra {
			m[k] = v
		}
		req, err := ReadEnv(envOf(m), p)
		return req.Import.Egress, err
	}
	got, err := read(nil)
	require.NoError(t, err)
	assert.Equal(t, &importer.EgressPolicy{Deny: datasource.DefaultEgressDeny()}, got, "env mode denies link-local and metadata by default")
	got, err = read(map[string]string{"IMPORTER_EGRESS_DENY": "none", "IMPORTER_EGRESS_ALLOW": "10.0.0.0/8,192.168.0.1"})
	require.NoError(t, err)
	assert.Empty(t, got.Deny)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.0.1/32")}, got.Allow)
	got, err = read(map[string]string{"IMPORTER_EGRESS_DENY": "default, 127.0.0.0/8"})
	require.NoError(t, err)
	assert.Equal(t, append(datasource.DefaultEgressDeny(), netip.MustParsePrefix("127.0.0.0/8")), got.Deny)
	_, err = read(map[string]string{"IMPORTER_EGRESS_ALLOW": "metadata"})
	require.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	assert.Contains(t, err.Error(), `IMPORTER_EGRESS_ALLOW: egress network "metadata"`)
}

// TestEnvHTTPSourceSchemeIsCaseInsensitive: URL schemes are case-insensitive
// (RFC 3986), so HTTP:// is still an http endpoint.
func TestEnvHTTPSourceSchemeIsCaseInsensitive(t *testing.T) {
	assert.NoError(t, checkHTTPEndpoint("HTTP://127.0.0.1:1/disk.raw"))
	assert.NoError(t, checkHTTPEndpoint("https://user:pw@example.org/disk.raw?sig=x"))
}

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

func TestParseQuantity(t *testing.T) {
	for in, want := range map[string]int64{
		"1Gi": 1073741824, "1G": 1000000000, "10Ki": 10240, "10k": 10000,
		"512": 512, "1.5Mi": 1572864, "": 0, " 2Mi ": 2 << 20,
	} {
		got, err := ParseQuantity(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"abc", "-1", "1Zi", "1e400Gi"} {
		_, err := ParseQuantity(bad)
		assert.Error(t, err, bad)
	}
}

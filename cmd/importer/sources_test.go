package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/internal/testkit/objtest"
	"github.com/diskimport/engine/internal/testkit/regtest"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// TestCLIObjectStores: s3:// with --s3-endpoint and --creds, gs:// with
// --gcs-endpoint, and CDI's IMPORTER_SOURCE=s3/gcs with CDI's endpoint
// forms, each against a real server on loopback.
func TestCLIObjectStores(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", "")
	dir := t.TempDir()
	raw, q := testimg.RawAndQCOW2(t, dir, 4<<20, 41)
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

func pushContainerdisk(t *testing.T, raw string) (ref string, img v1.Image) {
	reg := regtest.Start(t, regtest.Options{})
	img = regtest.Image(t, regtest.Config{Env: []string{"INSTANCETYPE_KUBEVIRT_IO_DEFAULT_PREFERENCE=fedora"}},
		regtest.Layer(t, regtest.Gzip, regtest.File{Name: "disk/disk.img", Path: raw}))
	return "docker://" + reg.Push(t, "cd/disk:v1", img, nil), img
}

func TestCLIRegistryImportAndDigest(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 2<<20, 31)
	ref, img := pushContainerdisk(t, raw)
	conf, auth := regtest.Hermetic(t)
	flags := []string{"--insecure-tls", "--registries-conf", conf, "--auth-file", auth, "--arch", "amd64"}

	dest := filepath.Join(dir, "out.img")
	code, stdout, _ := runCLI(t, nil, env(nil), append(append([]string{"--json"}, flags...), ref, dest)...)
	require.Equal(t, cdi.ExitOK, code)
	m := decode(t, []byte(stdout))
	assert.Equal(t, map[string]string{"instancetype.kubevirt.io/default-preference": "fedora"}, m.Labels)
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, dest, -1))

	want, err := img.Digest()
	require.NoError(t, err)
	code, stdout, _ = runCLI(t, nil, env(nil), append(append([]string{"digest"}, flags...), ref)...)
	require.Equal(t, cdi.ExitOK, code)
	assert.Equal(t, want.String(), strings.TrimSpace(stdout))

	code, _, stderr := runCLI(t, nil, env(nil), append(append([]string{"digest"}, flags...), ref+"-missing")...)
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "failed to pull image")
}

func TestEnvRegistryImport(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 2<<20, 32)
	ref, _ := pushContainerdisk(t, raw)
	conf, auth := regtest.Hermetic(t)
	prefix := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(prefix, "data"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(prefix, "scratch"), 0o755))
	code, _, _ := runCLI(t, nil, env(map[string]string{
		"IMPORTER_SOURCE":                      "registry",
		"IMPORTER_ENDPOINT":                    ref,
		"INSECURE_TLS":                         "true",
		"IMPORTER_REGISTRY_IMAGE_ARCHITECTURE": "amd64",
		"REGISTRY_AUTH_FILE":                   auth,
		"CONTAINERS_REGISTRIES_CONF":           conf,
		"IMPORTER_PATH_PREFIX":                 prefix,
	}))
	require.Equal(t, cdi.ExitOK, code)
	b, err := os.ReadFile(filepath.Join(prefix, "dev", "termination-log"))
	require.NoError(t, err)
	m := decode(t, b)
	assert.Equal(t, "Import Complete", m.Message)
	assert.Equal(t, map[string]string{"instancetype.kubevirt.io/default-preference": "fedora"}, m.Labels)
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, filepath.Join(prefix, "data", "disk.img"), -1))
}

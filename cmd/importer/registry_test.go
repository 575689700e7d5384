package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/cdi"
	"github.com/diskimport/engine/internal/regtest"
	"github.com/diskimport/engine/internal/testimg"
)

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

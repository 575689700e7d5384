package datasource

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/regtest"
)

func TestEnvToLabel(t *testing.T) {
	assert.Equal(t, "test.test.kubevirt.io/test-test", envToLabel("TEST_TEST_KUBEVIRT_IO_TEST_TEST"))
	assert.Equal(t, "instancetype.kubevirt.io/default-preference", envToLabel("INSTANCETYPE_KUBEVIRT_IO_DEFAULT_PREFERENCE"))
	assert.Equal(t, "kubevirt.io/os", envToLabel("KUBEVIRT_IO_OS"))
	assert.Equal(t, map[string]string{"instancetype.kubevirt.io/default-instancetype": "u1.medium"},
		envLabels([]string{"PATH=/bin", "INSTANCETYPE_KUBEVIRT_IO_DEFAULT_INSTANCETYPE=u1.medium"}))
	assert.Nil(t, envLabels([]string{"PATH=/bin"}))
}

func TestDiskEntryName(t *testing.T) {
	for in, want := range map[string]string{"disk/disk.img": "disk/disk.img", "./disk/x.qcow2": "disk/x.qcow2", "/disk/a": "disk/a"} {
		got, ok, err := diskEntryName(in)
		require.NoError(t, err, in)
		assert.True(t, ok, in)
		assert.Equal(t, want, got)
	}
	for _, in := range []string{"disk/", "disk", "etc/passwd", "disk/.wh.disk.img", "diskette/x"} {
		_, ok, err := diskEntryName(in)
		require.NoError(t, err, in)
		assert.False(t, ok, in)
	}
	_, _, err := diskEntryName("disk/../../etc/shadow")
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
}

func TestNewRoutesImageReferences(t *testing.T) {
	for _, ref := range []string{"docker://quay.io/containerdisks/fedora:latest", "oci-archive:/x/image.tar:v1", "oci:/x/layout:v1"} {
		s, err := New(ref, Config{})
		require.NoError(t, err, ref)
		_, ok := s.(Labeler)
		assert.True(t, ok, ref)
	}
	_, err := New("docker://UPPER/bad ref", Config{})
	require.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	s, err := New("oci-archive:/nonexistent/image.tar", Config{})
	require.NoError(t, err)
	_, err = s.Open(context.Background())
	require.ErrorIs(t, err, errdefs.ErrSourceUnreachable)
}

func TestRegistryRefusesEscapingEntryAndStreamsDisk(t *testing.T) {
	data := []byte("not really a disk, but bytes to compare\n")
	escaping := regtest.Image(t, regtest.Config{}, regtest.Layer(t, regtest.Gzip,
		regtest.File{Name: "disk/../../etc/cron.d/x", Data: data}))
	dir, _ := regtest.OCILayout(t, escaping, "v1")
	conf, auth := regtest.Hermetic(t)
	o := Config{Access: Access{RegistriesConf: conf, AuthFile: auth}}
	s, err := NewContainerImage("oci:"+dir+":v1", o)
	require.NoError(t, err)
	_, err = s.Open(context.Background())
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)

	good := regtest.Image(t, regtest.Config{}, regtest.Layer(t, regtest.Zstd, regtest.File{Name: "./disk/disk.img", Data: data}))
	dir, _ = regtest.OCILayout(t, good, "v1")
	s, err = NewContainerImage("oci:"+dir+":v1", o)
	require.NoError(t, err)
	st, err := s.Open(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { st.Body.Close() })
	assert.EqualValues(t, len(data), st.Size)
	assert.Empty(t, st.LocalPath)
	got, err := io.ReadAll(st.Body)
	require.NoError(t, err)
	assert.Equal(t, data, got)
}

func TestCrtDirLinksPEM(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ca.pem"), []byte("x"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "other.crt"), []byte("y"), 0o644))
	out, cleanup, err := crtDir(dir, t.TempDir())
	require.NoError(t, err)
	t.Cleanup(cleanup)
	assert.NotEqual(t, dir, out)
	for _, n := range []string{"ca-pem.crt", "other.crt"} {
		_, err := os.Stat(filepath.Join(out, n))
		assert.NoError(t, err, n)
	}
	// Only *.crt: used as is.
	dir2 := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir2, "ca.crt"), []byte("x"), 0o644))
	out, _, err = crtDir(dir2, "")
	require.NoError(t, err)
	assert.Equal(t, dir2, out)
}

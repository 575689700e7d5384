package importer_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/regtest"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// regDisks are the test disks: one raw source and its qcow2 / qcow2.xz.
type regDisks struct{ raw, qcow2, qcow2xz string }

func makeRegDisks(t *testing.T, seed uint64) regDisks {
	testimg.Need(t, "qemu-img", "xz")
	dir := t.TempDir()
	raw, q := testimg.RawAndQCOW2(t, dir, 4<<20, seed)
	qx := testimg.Compress(t, testimg.Convert(t, raw, filepath.Join(dir, "disk2.qcow2"), "qcow2"), "xz")
	return regDisks{raw: raw, qcow2: q, qcow2xz: qx}
}

func diskLayer(t *testing.T, comp, name, path string) v1.Layer {
	return regtest.Layer(t, comp, regtest.File{Name: "disk/", Dir: true}, regtest.File{Name: "disk/" + name, Path: path})
}

// regOpts are hermetic registry options: no host registries.conf or auth.
func regOpts(t *testing.T, source, target string) importer.Options {
	conf, auth := regtest.Hermetic(t)
	return importer.Options{Source: source, Target: target, Access: datasource.Access{
		RegistriesConf: conf,
		AuthFile:       auth,
		InsecureTLS:    true,
	},
		TargetOptions: importer.TargetOptions{
			ScratchDir: t.TempDir(),
		}, Logger: testimg.Logger(t)}
}

func assertSameDisk(t *testing.T, raw, target string) {
	t.Helper()
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, target, -1), "imported bytes differ from the source")
}

func TestRegistryImportsContainerdisks(t *testing.T) {
	d := makeRegDisks(t, 41)
	reg := regtest.Start(t, regtest.Options{})
	filler := regtest.Layer(t, regtest.Gzip, regtest.File{Name: "etc/", Dir: true}, regtest.File{Name: "etc/os-release", Data: []byte("ID=test\n")},
		regtest.File{Name: "disk/.wh.old.img", Data: nil})
	cases := []struct {
		name      string
		layers    []v1.Layer
		scratch   bool
		srcFormat string
	}{
		{"raw gzip layer", []v1.Layer{diskLayer(t, regtest.Gzip, "disk.img", d.raw)}, false, "raw"},
		{"raw zstd layer", []v1.Layer{diskLayer(t, regtest.Zstd, "disk.img", d.raw)}, false, "raw"},
		{"raw uncompressed layer", []v1.Layer{diskLayer(t, regtest.None, "disk.img", d.raw)}, false, "raw"},
		// A qcow2 layer is decoded straight onto the target: no scratch.
		{"qcow2", []v1.Layer{diskLayer(t, regtest.Gzip, "fedora.qcow2", d.qcow2)}, false, "qcow2"},
		{"qcow2.xz zstd layer", []v1.Layer{diskLayer(t, regtest.Zstd, "fedora.qcow2.xz", d.qcow2xz)}, false, "qcow2"},
		{"disk in second of three layers", []v1.Layer{filler, diskLayer(t, regtest.Gzip, "disk.img", d.raw),
			regtest.Layer(t, regtest.Gzip, regtest.File{Name: "disk/other.img", Data: make([]byte, 4096)})}, false, "raw"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			img := regtest.Image(t, regtest.Config{}, c.layers...)
			ref := reg.Push(t, "cd/case"+string(rune('a'+i))+":v1", img, nil)
			target := filepath.Join(t.TempDir(), "disk.img")
			res, err := importer.Import(context.Background(), regOpts(t, "docker://"+ref, target))
			require.NoError(t, err)
			assert.True(t, res.Complete)
			assert.Equal(t, c.srcFormat, res.SourceFormat)
			assert.Equal(t, c.scratch, res.ScratchUsed)
			// Every layer, raw or qcow2, streams onto the target.
			assert.NotContains(t, res.Phases, importer.PhaseConvert)
			assert.Contains(t, res.Phases, importer.PhaseTransferDataFile)
			assert.NotContains(t, res.Phases, importer.PhaseTransferScratch)
			assertSameDisk(t, d.raw, target)
		})
	}
}

func TestRegistryOntoLoopDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loop devices need root")
	}
	testimg.Need(t, "losetup")
	d := makeRegDisks(t, 42)
	reg := regtest.Start(t, regtest.Options{})
	for _, c := range []struct{ name, path string }{{"disk.img", d.raw}, {"disk.qcow2", d.qcow2}} {
		ref := reg.Push(t, "cd/loop:"+c.name[5:], regtest.Image(t, regtest.Config{}, diskLayer(t, regtest.Gzip, c.name, c.path)), nil)
		dev := testimg.LoopDevice(t, t.TempDir(), 4<<20)
		res, err := importer.Import(context.Background(), regOpts(t, "docker://"+ref, dev))
		require.NoError(t, err, c.name)
		assert.True(t, res.Complete)
		assertSameDisk(t, d.raw, dev)
	}
}

func TestRegistryRefusals(t *testing.T) {
	d := makeRegDisks(t, 43)
	reg := regtest.Start(t, regtest.Options{})

	t.Run("no disk file", func(t *testing.T) {
		ref := reg.Push(t, "cd/nodisk:v1", regtest.Image(t, regtest.Config{},
			regtest.Layer(t, regtest.Gzip, regtest.File{Name: "etc/hostname", Data: []byte("x\n")})), nil)
		res, err := importer.Import(context.Background(), regOpts(t, "docker://"+ref, filepath.Join(t.TempDir(), "d.img")))
		require.ErrorIs(t, err, errdefs.ErrInvalidImage)
		assert.Contains(t, err.Error(), "failed to find a VM disk image file under disk/")
		assert.Contains(t, err.Error(), ref)
		assert.False(t, res.Complete)
	})

	t.Run("bootc label", func(t *testing.T) {
		ref := reg.Push(t, "cd/bootc:v1", regtest.Image(t, regtest.Config{Labels: map[string]string{"containers.bootc": "1"}},
			diskLayer(t, regtest.Gzip, "disk.img", d.raw)), nil)
		_, err := importer.Import(context.Background(), regOpts(t, "docker://"+ref, filepath.Join(t.TempDir(), "d.img")))
		require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
		assert.Contains(t, err.Error(), "bootable container")
	})

	for _, comp := range []string{regtest.None, regtest.Gzip} {
		t.Run("corrupted blob "+comp, func(t *testing.T) {
			l := diskLayer(t, comp, "disk.img", d.raw)
			ref := reg.Push(t, "cd/corrupt-"+comp+":v1", regtest.Image(t, regtest.Config{}, l), nil)
			dg, err := l.Digest()
			require.NoError(t, err)
			reg.Corrupt(dg)
			target := filepath.Join(t.TempDir(), "d.img")
			res, err := importer.Import(context.Background(), regOpts(t, "docker://"+ref, target))
			require.ErrorIs(t, err, errdefs.ErrInvalidImage)
			if comp == regtest.None {
				// The tar still parses: only the digest check catches it.
				assert.Contains(t, err.Error(), "digest mismatch")
			}
			assert.False(t, res.Complete)
			_, serr := os.Stat(target)
			assert.True(t, os.IsNotExist(serr), "a failed import must not leave the target file")
		})
	}

	t.Run("plain http needs insecure", func(t *testing.T) {
		ref := reg.Push(t, "cd/plain:v1", regtest.Image(t, regtest.Config{}, diskLayer(t, regtest.Gzip, "disk.img", d.raw)), nil)
		o := regOpts(t, "docker://"+ref, filepath.Join(t.TempDir(), "d.img"))
		o.InsecureTLS = false
		_, err := importer.Import(context.Background(), o)
		require.ErrorIs(t, err, errdefs.ErrSourceUnreachable)
	})
}

func TestRegistryLabelsAndTerminationMessage(t *testing.T) {
	d := makeRegDisks(t, 44)
	reg := regtest.Start(t, regtest.Options{})
	ref := reg.Push(t, "cd/labels:v1", regtest.Image(t, regtest.Config{Env: []string{
		"PATH=/usr/bin",
		"INSTANCETYPE_KUBEVIRT_IO_DEFAULT_INSTANCETYPE=u1.medium",
		"INSTANCETYPE_KUBEVIRT_IO_DEFAULT_PREFERENCE=fedora",
	}}, diskLayer(t, regtest.Gzip, "disk.img", d.raw)), nil)
	target := filepath.Join(t.TempDir(), "disk.img")
	res, err := importer.Import(context.Background(), regOpts(t, "docker://"+ref, target))
	require.NoError(t, err)
	want := map[string]string{
		"instancetype.kubevirt.io/default-instancetype": "u1.medium",
		"instancetype.kubevirt.io/default-preference":   "fedora",
	}
	assert.Equal(t, want, res.Labels)
	var msg struct {
		Labels map[string]string `json:"labels"`
	}
	b, err := json.Marshal(res)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &msg))
	assert.Equal(t, want, msg.Labels)
	assertSameDisk(t, d.raw, target)
}

func TestRegistryIndexPicksArch(t *testing.T) {
	amd := makeRegDisks(t, 45)
	arm := makeRegDisks(t, 46)
	reg := regtest.Start(t, regtest.Options{})
	idx := regtest.Index(t, map[string]v1.Image{
		"amd64": regtest.Image(t, regtest.Config{Arch: "amd64"}, diskLayer(t, regtest.Gzip, "disk.img", amd.raw)),
		"arm64": regtest.Image(t, regtest.Config{Arch: "arm64"}, diskLayer(t, regtest.Zstd, "disk.qcow2", arm.qcow2)),
	}, "amd64", "arm64")
	ref := reg.Push(t, "cd/multi:v1", nil, idx)
	for arch, want := range map[string]string{"amd64": amd.raw, "arm64": arm.raw} {
		target := filepath.Join(t.TempDir(), "disk.img")
		o := regOpts(t, "docker://"+ref, target)
		o.Arch = arch
		_, err := importer.Import(context.Background(), o)
		require.NoError(t, err, arch)
		assertSameDisk(t, want, target)
	}
	o := regOpts(t, "docker://"+ref, filepath.Join(t.TempDir(), "disk.img"))
	o.Arch = "s390x"
	_, err := importer.Import(context.Background(), o)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "linux/amd64, linux/arm64")
	assert.Contains(t, err.Error(), "s390x")

	// The digest a poller sees is the index's, by tag or by digest.
	want, err := idx.Digest()
	require.NoError(t, err)
	o = regOpts(t, "", "")
	got, err := importer.ResolveDigest(context.Background(), "docker://"+ref, o)
	require.NoError(t, err)
	assert.Equal(t, want.String(), got)
	got, err = importer.ResolveDigest(context.Background(), "docker://"+reg.Host+"/cd/multi@"+want.String(), o)
	require.NoError(t, err)
	assert.Equal(t, want.String(), got)
}

func TestRegistryTLSAndAuth(t *testing.T) {
	d := makeRegDisks(t, 47)
	reg := regtest.Start(t, regtest.Options{TLS: true, User: "alice", Pass: "s3cret"})
	ref := reg.Push(t, "cd/private:v1", regtest.Image(t, regtest.Config{}, diskLayer(t, regtest.Gzip, "disk.img", d.raw)), nil)

	base := func() importer.Options {
		o := regOpts(t, "docker://"+ref, filepath.Join(t.TempDir(), "disk.img"))
		o.InsecureTLS = false
		o.CertDir = reg.CADir // holds ca.pem, not *.crt
		return o
	}
	t.Run("username and password", func(t *testing.T) {
		o := base()
		o.Username, o.Password = "alice", "s3cret"
		_, err := importer.Import(context.Background(), o)
		require.NoError(t, err)
		assertSameDisk(t, d.raw, o.Target)
	})
	t.Run("auth file", func(t *testing.T) {
		o := base()
		cfg := `{"auths":{"` + reg.Host + `":{"auth":"YWxpY2U6czNjcmV0"}}}` // alice:s3cret
		require.NoError(t, os.WriteFile(o.AuthFile, []byte(cfg), 0o600))
		_, err := importer.Import(context.Background(), o)
		require.NoError(t, err)
		assertSameDisk(t, d.raw, o.Target)
	})
	t.Run("wrong password", func(t *testing.T) {
		o := base()
		o.Username, o.Password = "alice", "nope"
		_, err := importer.Import(context.Background(), o)
		require.ErrorIs(t, err, errdefs.ErrSourceRefused)
	})
	t.Run("unknown CA", func(t *testing.T) {
		o := base()
		o.Username, o.Password = "alice", "s3cret"
		o.CertDir = ""
		_, err := importer.Import(context.Background(), o)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "certificate")
	})
}

func TestRegistryOCIArchiveAndLayout(t *testing.T) {
	d := makeRegDisks(t, 48)
	img := regtest.Image(t, regtest.Config{Env: []string{"KUBEVIRT_IO_OS=fedora"}}, diskLayer(t, regtest.Zstd, "disk.qcow2", d.qcow2))
	dir, archive := regtest.OCILayout(t, img, "v1")
	want, err := img.Digest()
	require.NoError(t, err)
	for _, src := range []string{"oci-archive:" + archive + ":v1", "oci:" + dir + ":v1"} {
		target := filepath.Join(t.TempDir(), "disk.img")
		res, err := importer.Import(context.Background(), regOpts(t, src, target))
		require.NoError(t, err, src)
		assert.Equal(t, map[string]string{"kubevirt.io/os": "fedora"}, res.Labels)
		assertSameDisk(t, d.raw, target)
		got, err := importer.ResolveDigest(context.Background(), src, regOpts(t, "", ""))
		require.NoError(t, err)
		assert.Equal(t, want.String(), got)
	}
}

package engine

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/nbdserver"
	"github.com/diskimport/engine/qemu"
)

func TestCheckInfoSelfContained(t *testing.T) {
	const img = "/scratch/disk.vmdk"
	u, err := nbdserver.ServeUnix(context.Background(), "importer-nbd-*", "image.sock", "test export", func(context.Context) (*nbdserver.Server, error) {
		return nbdserver.New(bytes.NewReader(nil), 0, nil), nil
	})
	require.NoError(t, err)
	t.Cleanup(func() { u.Stop(slog.New(slog.DiscardHandler), nil) })
	export := &rangedExport{unix: u}
	sock := u.SocketPath()
	spec := export.spec()
	require.Equal(t, `json:{"backing":null,"file":{"driver":"nbd","server":{"path":"`+sock+`","type":"unix"}}}`, spec)
	ok := map[string]struct {
		info *qemu.ImageInfo
		self []string
	}{
		"local monolithic":        {&qemu.ImageInfo{ExtentFilenames: []string{img}}, selfNames(img, nil)},
		"local, relative extent":  {&qemu.ImageInfo{ExtentFilenames: []string{"disk.vmdk"}}, selfNames(img, nil)},
		"qcow2, no extents":       {&qemu.ImageInfo{}, selfNames(img, nil)},
		"file child":              {&qemu.ImageInfo{Children: []qemu.ChildInfo{{Name: "file", Filename: img}}}, selfNames(img, nil)},
		"ranged: the NBD export":  {&qemu.ImageInfo{ExtentFilenames: []string{"nbd+unix://?socket=" + sock}}, selfNames(spec, export)},
		"ranged: file child, nbd": {&qemu.ImageInfo{Children: []qemu.ChildInfo{{Name: "file", Filename: "nbd+unix://?socket=" + sock}}}, selfNames(spec, export)},
	}
	for name, c := range ok {
		assert.NoError(t, checkInfoSelfContained(c.info, c.self...), name)
	}
	bad := map[string]struct {
		info *qemu.ImageInfo
		self []string
	}{
		"backing":                 {&qemu.ImageInfo{BackingFilename: "/etc/passwd"}, selfNames(img, nil)},
		"data file":               {&qemu.ImageInfo{DataFile: "/dev/sda"}, selfNames(img, nil)},
		"extent to a host file":   {&qemu.ImageInfo{ExtentFilenames: []string{"/etc/shadow"}}, selfNames(img, nil)},
		"extent beside the image": {&qemu.ImageInfo{ExtentFilenames: []string{"disk-flat.vmdk"}}, selfNames(img, nil)},
		"two extents":             {&qemu.ImageInfo{ExtentFilenames: []string{img, img}}, selfNames(img, nil)},
		"extents child":           {&qemu.ImageInfo{Children: []qemu.ChildInfo{{Name: "file", Filename: img}, {Name: "extents.0", Filename: "/etc/shadow"}}}, selfNames(img, nil)},
		"file child elsewhere":    {&qemu.ImageInfo{Children: []qemu.ChildInfo{{Name: "file", Filename: "/etc/shadow"}}}, selfNames(img, nil)},
		"ranged: a host file":     {&qemu.ImageInfo{ExtentFilenames: []string{"/etc/shadow"}}, selfNames(spec, export)},
		"ranged: a local path":    {&qemu.ImageInfo{ExtentFilenames: []string{sock}}, selfNames(spec, export)},
		"ranged: another socket":  {&qemu.ImageInfo{ExtentFilenames: []string{"nbd+unix://?socket=/run/other.sock"}}, selfNames(spec, export)},
	}
	for name, c := range bad {
		err := checkInfoSelfContained(c.info, c.self...)
		require.ErrorIs(t, err, errdefs.ErrUnsafeImage, name)
		t.Logf("%s: %v", name, err)
	}
}

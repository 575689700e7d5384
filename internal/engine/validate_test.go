package engine

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/nbdserver"
)

// qemu-img's names for the image it opened: a local path as given and
// absolute, or the ranged export's spec and its socket's two URI forms.
func TestSelfNamesOfLocalPathsAndTheRangedExport(t *testing.T) {
	u, err := nbdserver.ServeUnix(context.Background(), "importer-nbd-*", "image.sock", "test export", func(context.Context) (*nbdserver.Server, error) {
		return nbdserver.New(bytes.NewReader(nil), 0, nil), nil
	})
	require.NoError(t, err)
	t.Cleanup(func() { u.Stop(slog.New(slog.DiscardHandler), nil) })
	export := &rangedExport{unix: u}
	sock := u.SocketPath()
	spec := export.spec()
	require.Equal(t, `json:{"backing":null,"file":{"driver":"nbd","server":{"path":"`+sock+`","type":"unix"}}}`, spec)
	assert.Equal(t, []string{spec, "nbd+unix://?socket=" + sock, "nbd+unix:///?socket=" + sock}, selfNames(spec, export))
	const img = "/scratch/disk.vmdk"
	assert.Equal(t, []string{img, img}, selfNames(img, nil), "an absolute path is its own absolute name")
	names := selfNames("disk.vmdk", nil)
	require.Len(t, names, 2)
	assert.Equal(t, "disk.vmdk", names[0])
	assert.True(t, filepath.IsAbs(names[1]))
}

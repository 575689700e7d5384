package importer

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/nbdserver"
)

// qemu-img's names for the image it opened: a local path as given and
// absolute, or the ranged export's spec and its socket's two URI forms.
func TestSelfNamesOfLocalPathsAndTheRangedExport(t *testing.T) {
	open := func(context.Context) (nbdserver.ImageReader, error) { return emptyImage{}, nil }
	export, err := nbdserver.ServeImage(context.Background(), open, nbdserver.ImageExportOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { export.Stop(slog.New(slog.DiscardHandler)) })
	spec := export.QemuSpec()
	sock := strings.TrimPrefix(export.QemuNames()[0], "nbd+unix://?socket=")
	require.True(t, filepath.IsAbs(sock), "socket %q", sock)
	assert.Equal(t, []string{spec, "nbd+unix://?socket=" + sock, "nbd+unix:///?socket=" + sock}, selfNames(spec, export))
	const img = "/scratch/disk.vmdk"
	assert.Equal(t, []string{img, img}, selfNames(img, nil), "an absolute path is its own absolute name")
	names := selfNames("disk.vmdk", nil)
	require.Len(t, names, 2)
	assert.Equal(t, "disk.vmdk", names[0])
	assert.True(t, filepath.IsAbs(names[1]))
}

// emptyImage is an image of no bytes.
type emptyImage struct{}

func (emptyImage) ReadAt([]byte, int64) (int, error) { return 0, io.EOF }
func (emptyImage) Size() int64                       { return 0 }
func (emptyImage) Close() error                      { return nil }

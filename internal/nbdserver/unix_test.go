package nbdserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Unix export lives in a directory only its owner may enter; qemu-img
// reads it through QemuNode; a failed read is named by Cause beside the
// client's own message; Stop removes the directory, and a second Stop (or
// one on nil) does nothing.
func TestUnixExportServesPrivatelyAndCleansUp(t *testing.T) {
	needQemu(t)
	data := testData(4 << 20)
	u, err := ServeUnix(context.Background(), "nbd-test-*", "image.sock", "reading the test image", func(context.Context) (*Server, error) {
		return New(failAt{r: bytes.NewReader(data), bad: 3 << 20}, int64(len(data)), nil), nil
	})
	require.NoError(t, err)
	log := slog.New(slog.DiscardHandler)
	t.Cleanup(func() { u.Stop(log, nil) })
	dir := filepath.Dir(u.SocketPath())
	st, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())

	b, err := json.Marshal(map[string]any{"file": u.QemuNode()})
	require.NoError(t, err)
	out, err := qemuImg(t, "convert", "-f", "raw", "-O", "raw", "json:"+string(b), filepath.Join(t.TempDir(), "out.raw"))
	require.Error(t, err, "%s", out)
	assert.ErrorIs(t, u.Err(), errBackend)
	clientErr := errors.New("qemu-img: Input/output error")
	cause := u.Cause(clientErr)
	assert.ErrorIs(t, cause, clientErr)
	assert.ErrorIs(t, cause, errBackend)
	assert.Contains(t, cause.Error(), "reading the test image failed")

	u.Stop(log, nil)
	_, err = os.Stat(dir)
	assert.ErrorIs(t, err, os.ErrNotExist)
	u.Stop(log, nil)
	var none *UnixExport
	none.Stop(log, nil)
	assert.Equal(t, clientErr, none.Cause(clientErr))
}

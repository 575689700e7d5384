package qemu

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
)

// Parallel reaches qemu-img as -m (the debug log shows the arguments), the
// bytes are the same, and what qemu would refuse is refused first.
func TestConvertParallel(t *testing.T) {
	requireTools(t)
	dir := t.TempDir()
	raw, want := makeRaw(t, dir)
	q := filepath.Join(dir, "src.qcow2")
	qemuImg(t, "convert", "-f", "raw", "-O", "qcow2", raw, q)
	var logs bytes.Buffer
	r := &Runner{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	ctx := context.Background()
	out := filepath.Join(dir, "out.raw")
	_, err := r.Convert(ctx, q, out, ConvertOptions{SrcFormat: "qcow2", DstFormat: "raw", Parallel: 16})
	require.NoError(t, err)
	requireSameContent(t, want, out)
	require.Contains(t, logs.String(), "-m 16")

	for _, n := range []int{-1, 17} {
		_, err = r.Convert(ctx, q, filepath.Join(dir, "bad.raw"), ConvertOptions{SrcFormat: "qcow2", DstFormat: "raw", Parallel: n})
		require.ErrorIs(t, err, errdefs.ErrInvalidOptions, "-m %d", n)
	}
}

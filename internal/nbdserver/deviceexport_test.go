package nbdserver

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/internal/volume"
)

// qemu-img writes a loop device only through the export: until the writer's
// Finish the device's first MiB reads zeros (the image's head is held in
// memory), then the device holds the image byte for byte, and Sum is the
// content digest of what was written.
func TestDeviceExportWritesThroughTheDeviceWriter(t *testing.T) {
	needQemu(t)
	data := testData(6 << 20)
	src := qcow2Of(t, data)
	dev, w, e := serveLoopDevice(t, 8<<20)
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)

	out, err := qemuImg(t, "convert", "-n", "-f", "qcow2", "-O", "raw", src, e.QemuSpec())
	require.NoError(t, err, "%s", out)
	e.Stop(log)
	require.NoError(t, e.Err())
	assert.Equal(t, make([]byte, 1<<20), readDevice(t, dev, 1<<20), "the head reached the device before Finish")
	require.NoError(t, w.Finish(ctx))
	assert.True(t, bytes.Equal(data, readDevice(t, dev, int64(len(data)))), "the device does not hold the image")

	got, err := e.Sum(int64(len(data)))
	require.NoError(t, err)
	want := blkhash.New(0)
	_, _ = want.Write(data)
	assert.Equal(t, want.Sum(), got)
	e.Stop(log) // a second Stop does nothing
}

// A write the device refuses (set read-only under the open writer) is the
// export's Err and named by Cause beside qemu-img's message; Stop and Cause
// are safe on nil.
func TestDeviceExportReportsWriteFailures(t *testing.T) {
	needQemu(t)
	testimg.Need(t, "blockdev")
	src := qcow2Of(t, testData(6<<20))
	dev, _, e := serveLoopDevice(t, 8<<20)
	log := slog.New(slog.DiscardHandler)
	testimg.Run(t, "blockdev", "--setro", dev)
	t.Cleanup(func() { testimg.Run(t, "blockdev", "--setrw", dev) })

	out, err := qemuImg(t, "convert", "-n", "-f", "qcow2", "-O", "raw", src, e.QemuSpec())
	require.Error(t, err, "%s", out)
	require.Error(t, e.Err(), "the refused write is not the export's error")
	cause := e.Cause(err)
	assert.ErrorIs(t, cause, err)
	assert.ErrorIs(t, cause, e.Err())
	assert.Contains(t, cause.Error(), "writing the target failed")

	var none *DeviceExport
	none.Stop(log)
	assert.Equal(t, err, none.Cause(err))
}

// serveLoopDevice serves a new loop device of size bytes (0xA5 throughout)
// through a DeviceExport over its DeviceWriter, stopped when the test ends.
func serveLoopDevice(t *testing.T, size int64) (string, *volume.DeviceWriter, *DeviceExport) {
	t.Helper()
	dev := testimg.LoopDevice(t, t.TempDir(), size)
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	tgt, err := volume.Open(ctx, volume.Options{Path: dev, Logger: log})
	require.NoError(t, err)
	t.Cleanup(func() { tgt.Close() })
	w, err := tgt.NewDeviceWriter(ctx, volume.DeviceWriterOptions{})
	require.NoError(t, err)
	e, err := ServeDevice(ctx, w, log)
	require.NoError(t, err)
	t.Cleanup(func() { e.Stop(log) })
	return dev, w, e
}

func readDevice(t *testing.T, dev string, n int64) []byte {
	t.Helper()
	f, err := os.Open(dev)
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, n)
	_, err = io.ReadFull(f, b)
	require.NoError(t, err)
	return b
}

//go:build linux

package volume_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/internal/volume"
)

// bootableLoop attaches a loop device of size bytes with sectorSize-byte
// sectors holding an old image: random bytes under a protective MBR and a
// GPT with its backup header in the last sector.
func bootableLoop(t *testing.T, size, sectorSize int64) (dev string, old []byte) {
	t.Helper()
	dev = newLoop(t, size, fillRandom(uint64(sectorSize)), "--sector-size", fmt.Sprint(sectorSize))
	testimg.BootableGPT(t, dev, sectorSize)
	require.True(t, testimg.HasBootSignature(t, dev))
	require.True(t, testimg.HasBackupGPT(t, dev))
	return dev, readDev(t, dev, 0, size)
}

// Each way a writer of a device can stop after its first write leaves the
// old image's first MiB and its backup GPT zeroed, for 512- and 4096-byte
// sectors; a finished import leaves the new image with no old backup GPT
// past it.
func TestWriteOverBootableDeviceLeavesNoMixOfImages(t *testing.T) {
	const devSize = 16 * mib
	img := makeImage(31, 6*mib+4096, 0.3)
	boom := errors.New("connection reset")
	stops := map[string]func(t *testing.T, tg *volume.Target) error{
		"sequential writer, source fails": func(t *testing.T, tg *volume.Target) error {
			w, err := tg.NewWriter()
			require.NoError(t, err)
			_, err = w.ReadFrom(io.MultiReader(bytes.NewReader(img[:5*mib]), &errReader{boom}))
			require.ErrorIs(t, err, boom)
			return nil
		},
		"sequential writer, cancelled": func(t *testing.T, tg *volume.Target) error {
			ctx, cancel := context.WithCancel(context.Background())
			w, err := tg.NewWriter(volume.WithContext(ctx))
			require.NoError(t, err)
			_, err = w.Write(img[:5*mib])
			require.NoError(t, err)
			cancel()
			_, err = w.Finish()
			return err
		},
		"sequential writer, finished": func(t *testing.T, tg *volume.Target) error {
			writeAll(t, tg, img)
			return tg.Commit(context.Background())
		},
		"device writer, abandoned": func(t *testing.T, tg *volume.Target) error {
			w, err := tg.NewDeviceWriter(context.Background(), volume.DeviceWriterOptions{})
			require.NoError(t, err)
			for _, p := range pieces(img[:5*mib], 7) {
				if p.zero {
					require.NoError(t, w.ZeroAt(int64(p.off), int64(p.n), true, false))
				} else {
					_, err := w.WriteAt(img[p.off:p.off+p.n], int64(p.off))
					require.NoError(t, err)
				}
			}
			return nil
		},
		"device writer, only a zero range past the head": func(t *testing.T, tg *volume.Target) error {
			w, err := tg.NewDeviceWriter(context.Background(), volume.DeviceWriterOptions{})
			require.NoError(t, err)
			return w.ZeroAt(2*mib, 4096, true, false)
		},
		"device writer, finished": func(t *testing.T, tg *volume.Target) error {
			w, err := tg.NewDeviceWriter(context.Background(), volume.DeviceWriterOptions{})
			require.NoError(t, err)
			_, err = w.WriteAt(img, 0)
			require.NoError(t, err)
			require.NoError(t, w.Finish(context.Background()))
			return tg.Commit(context.Background())
		},
	}
	for _, sector := range []int64{512, 4096} {
		for name, stop := range stops {
			t.Run(fmt.Sprintf("%d/%s", sector, name), func(t *testing.T) {
				dev, old := bootableLoop(t, devSize, sector)
				tg, err := volume.Open(context.Background(), volume.Options{Path: dev})
				require.NoError(t, err)
				err = stop(t, tg)
				require.NoError(t, tg.Close())
				got := readDev(t, dev, 0, devSize)
				assert.False(t, testimg.HasBackupGPT(t, dev), "the old backup GPT is still there")
				requireSameBytes(t, make([]byte, mib), got[devSize-mib:])
				if name == "sequential writer, finished" || name == "device writer, finished" {
					require.NoError(t, err)
					requireSameBytes(t, img, got[:len(img)])
					// Between the image and the last MiB the device is as it was.
					requireSameBytes(t, old[len(img):devSize-mib], got[len(img):devSize-mib])
					return
				}
				requireSameBytes(t, make([]byte, mib), got[:mib])
				assert.False(t, testimg.HasBootSignature(t, dev))
			})
		}
	}
}

// A device whose last sector is no GPT header keeps its last MiB; one that
// was never written (the source failed before its first byte) keeps all of
// the old image.
func TestWriteOverDeviceTouchesOnlyWhatItMust(t *testing.T) {
	const devSize = 8 * mib
	dev := newLoop(t, devSize, fillRandom(41))
	old := readDev(t, dev, 0, devSize)
	tg, err := volume.Open(context.Background(), volume.Options{Path: dev})
	require.NoError(t, err)
	w, err := tg.NewWriter()
	require.NoError(t, err)
	boom := errors.New("refused")
	_, err = w.ReadFrom(&errReader{boom})
	require.ErrorIs(t, err, boom)
	require.NoError(t, tg.Close())
	requireSameBytes(t, old, readDev(t, dev, 0, devSize))

	tg, err = volume.Open(context.Background(), volume.Options{Path: dev})
	require.NoError(t, err)
	img := makeImage(42, 3*mib, 0.2)
	writeAll(t, tg, img)
	require.NoError(t, tg.Commit(context.Background()))
	require.NoError(t, tg.Close())
	requireImageOver(t, dev, img, old)
}

// A target aborted after a writer's Finish put the image's head on the
// device (a verification or the commit failed after it) has its first MiB
// zeroed again; after Commit, Close leaves the image.
func TestAbortAfterFinishZeroesTheImageHead(t *testing.T) {
	const devSize = 8 * mib
	img := makeImage(51, 3*mib, 0.2)
	for name, finish := range map[string]func(t *testing.T, tg *volume.Target){
		"sequential writer": func(t *testing.T, tg *volume.Target) { writeAll(t, tg, img) },
		"device writer": func(t *testing.T, tg *volume.Target) {
			w, err := tg.NewDeviceWriter(context.Background(), volume.DeviceWriterOptions{})
			require.NoError(t, err)
			_, err = w.WriteAt(img, 0)
			require.NoError(t, err)
			require.NoError(t, w.Finish(context.Background()))
		},
	} {
		t.Run(name, func(t *testing.T) {
			dev, _ := bootableLoop(t, devSize, 512)
			tg, err := volume.Open(context.Background(), volume.Options{Path: dev})
			require.NoError(t, err)
			finish(t, tg)
			requireSameBytes(t, img[:mib], readDev(t, dev, 0, mib))
			require.NoError(t, tg.Abort())
			got := readDev(t, dev, 0, devSize)
			requireSameBytes(t, make([]byte, mib), got[:mib])
			requireSameBytes(t, img[mib:], got[mib:len(img)])

			tg, err = volume.Open(context.Background(), volume.Options{Path: dev})
			require.NoError(t, err)
			finish(t, tg)
			require.NoError(t, tg.Commit(context.Background()))
			require.NoError(t, tg.Close())
			requireSameBytes(t, img, readDev(t, dev, 0, int64(len(img))))
		})
	}
}

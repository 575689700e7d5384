//go:build linux

package volume_test

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/volume"
)

const benchSize = 512 * mib

// benchImage is a 512 MiB image shaped like perf-limits §2: about a third
// data (random and text) and two thirds zeros, in runs of varied length.
func benchImage(b *testing.B) []byte {
	b.Helper()
	return makeImage(42, benchSize, 0.62)
}

func benchWriter(b *testing.B, open func() *volume.Target) {
	img := benchImage(b)
	b.SetBytes(int64(len(img)))
	b.ResetTimer()
	var data int64
	for b.Loop() {
		tg := open()
		w, err := tg.NewWriter(volume.WithContext(context.Background()))
		require.NoError(b, err)
		_, err = io.Copy(w, onlyReader{bytes.NewReader(img)})
		require.NoError(b, err)
		_, err = w.Finish()
		require.NoError(b, err)
		require.NoError(b, tg.Commit(context.Background()))
		require.NoError(b, tg.Close())
		data = w.DataBytes()
	}
	b.ReportMetric(float64(data)/float64(len(img))*100, "%data")
}

func BenchmarkWriterFile(b *testing.B) {
	dir := b.TempDir()
	benchWriter(b, func() *volume.Target {
		tg, err := volume.Open(context.Background(), volume.Options{Path: filepath.Join(dir, "disk.img")})
		require.NoError(b, err)
		return tg
	})
}

func BenchmarkWriterLoop(b *testing.B) {
	dev := newLoop(b, benchSize, nil)
	benchWriter(b, func() *volume.Target {
		tg, err := volume.Open(context.Background(), volume.Options{Path: dev})
		require.NoError(b, err)
		return tg
	})
}

// BenchmarkWriterLoopDense writes 512 MiB with no zero runs: the device's
// raw data rate through the pipeline.
func BenchmarkWriterLoopDense(b *testing.B) {
	dev := newLoop(b, benchSize, nil)
	img := makeImage(43, benchSize, 0)
	b.SetBytes(int64(len(img)))
	for b.Loop() {
		tg, err := volume.Open(context.Background(), volume.Options{Path: dev})
		require.NoError(b, err)
		w, err := tg.NewWriter()
		require.NoError(b, err)
		_, err = io.Copy(w, onlyReader{bytes.NewReader(img)})
		require.NoError(b, err)
		_, err = w.Finish()
		require.NoError(b, err)
		require.NoError(b, tg.Commit(context.Background()))
		require.NoError(b, tg.Close())
	}
}

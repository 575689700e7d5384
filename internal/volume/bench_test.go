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

// benchWriter writes img through a Writer onto the target open gives, once
// a loop, and reports the share of img that was data.
func benchWriter(b *testing.B, img []byte, open func() *volume.Target) {
	b.SetBytes(int64(len(img)))
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

// opener opens the target at path, for benchWriter.
func opener(b *testing.B, path string) func() *volume.Target {
	return func() *volume.Target {
		tg, err := volume.Open(context.Background(), volume.Options{Path: path})
		require.NoError(b, err)
		return tg
	}
}

func BenchmarkWriterFile(b *testing.B) {
	benchWriter(b, benchImage(b), opener(b, filepath.Join(b.TempDir(), "disk.img")))
}

func BenchmarkWriterLoop(b *testing.B) {
	benchWriter(b, benchImage(b), opener(b, newLoop(b, benchSize, nil)))
}

// BenchmarkWriterLoopDense writes 512 MiB with no zero runs: the device's
// raw data rate through the pipeline.
func BenchmarkWriterLoopDense(b *testing.B) {
	benchWriter(b, makeImage(43, benchSize, 0), opener(b, newLoop(b, benchSize, nil)))
}

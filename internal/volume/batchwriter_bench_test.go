//go:build linux

package volume_test

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/volume"
)

// BenchmarkBatchedWriter writes 256 MiB as the qcow2 decoder does
// (64 KiB clusters in guest order, every third range a hole) onto a
// direct-io loop device: straight through the DeviceWriter, and through
// the BatchedWriter in a few pool shapes (buffer size x buffers x
// writers). Root only.
//
//	go test -run '^$' -bench BatchedWriter -benchtime 3x ./internal/volume
func BenchmarkBatchedWriter(b *testing.B) {
	const size = 256 << 20
	const cluster = 64 << 10
	data := make([]byte, cluster)
	for i := range data {
		data[i] = byte(i*7 + 1)
	}
	shapes := []struct{ buf, buffers, writers int }{
		{0, 0, 0}, // the DeviceWriter alone
		{1 << 20, 8, 4},
		{2 << 20, 8, 4},
		{4 << 20, 6, 4},
		{4 << 20, 8, 6},
	}
	for _, sh := range shapes {
		name := "direct"
		if sh.buf > 0 {
			name = fmt.Sprintf("%dMiBx%dw%d", sh.buf>>20, sh.buffers, sh.writers)
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(size)
			for range b.N {
				b.StopTimer()
				ctx := context.Background()
				_, w := sinkDevice(b, ctx, size)
				var sink io.WriterAt = w
				var stage *volume.BatchedWriter
				if sh.buf > 0 {
					stage = volume.NewBatchedWriter(ctx, w, volume.BatchOptions{BufferSize: sh.buf, Buffers: sh.buffers, Writers: sh.writers})
					sink = stage
				}
				b.StartTimer()
				for off := int64(0); off < size; off += cluster {
					if (off/cluster)%3 == 2 {
						continue
					}
					_, err := sink.WriteAt(data, off)
					require.NoError(b, err)
				}
				if stage != nil {
					require.NoError(b, stage.Flush())
					stage.Close()
				}
				require.NoError(b, w.Sync())
			}
		})
	}
}

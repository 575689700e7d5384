package format

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	kgzip "github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/iostage"
)

// BenchmarkReadAhead decodes gzip and zstd fetched from an HTTP server on
// 127.0.0.1 (the server and its sendfile share the machine, as in the
// bench) with the decoder reading the response body itself ("direct", as
// newDecoder runs zstd) and through a read-ahead goroutine (as it runs Go's
// gzip), the decoder alone: in an import the target writer's reader
// goroutine is a stage of its own.
func BenchmarkReadAhead(b *testing.B) {
	dir := b.TempDir()
	raw := filepath.Join(dir, "bench.raw")
	const rawLen = 128 << 20
	writeRaw(b, raw, variedContent(rawLen, 11))
	compressFile(b, raw, raw+".gz", "gzip", "-6")
	compressFile(b, raw, raw+".zst", "zstd", "-q", "-3")
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer srv.Close()
	decoders := map[string]func(io.Reader) (io.Reader, func()){
		"gzip": func(r io.Reader) (io.Reader, func()) {
			zr, err := kgzip.NewReader(r)
			require.NoError(b, err)
			return zr, func() { zr.Close() }
		},
		"zstd": func(r io.Reader) (io.Reader, func()) {
			zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<63))
			require.NoError(b, err)
			return zr, zr.Close
		},
	}
	buf := make([]byte, 4<<20)
	for _, codec := range []string{"gzip", "zstd"} {
		url := srv.URL + "/bench.raw." + map[string]string{"gzip": "gz", "zstd": "zst"}[codec]
		for _, mode := range []string{"direct", "readahead"} {
			b.Run(codec+"/"+mode, func(b *testing.B) {
				b.SetBytes(rawLen)
				for b.Loop() {
					resp, err := http.Get(url)
					require.NoError(b, err)
					var body io.Reader = resp.Body
					if mode == "readahead" {
						ra := iostage.NewReadAhead(resp.Body, readAheadSize, readAheadBuffers)
						defer ra.Close()
						body = ra
					}
					dec, closeDec := decoders[codec](&sourceReader{r: body})
					var n int64
					for {
						k, eof, err := iostage.ReadChunk(dec, buf)
						require.NoError(b, err)
						n += int64(k)
						if eof {
							break
						}
					}
					require.EqualValues(b, rawLen, n)
					closeDec()
					resp.Body.Close()
				}
			})
		}
	}
}

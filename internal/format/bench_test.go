package format

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	kgzip "github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/klauspost/pgzip"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/iostage"
)

// benchData writes ~64 MiB of mixed content (random, text, zeros) and
// returns its path.
func benchData(b *testing.B) string {
	b.Helper()
	p := filepath.Join(b.TempDir(), "bench.raw")
	writeRaw(b, p, variedContent(64<<20, 99))
	return p
}

func BenchmarkSniff(b *testing.B) {
	heads := [][]byte{make([]byte, DefaultPeekSize), []byte("QFI\xfb\x00\x00\x00\x03"), hugeDictXZ(20)}
	copy(heads[0][0x8001:], "CD001")
	b.ReportAllocs()
	for b.Loop() {
		for _, h := range heads {
			Sniff(h)
		}
	}
}

// benchDecode measures Open + a full read of a compressed file into
// io.Discard, in decompressed MB/s.
func benchDecode(b *testing.B, path string, rawLen int64, o Options) {
	b.Helper()
	comp, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(rawLen)
	b.ResetTimer()
	for b.Loop() {
		s, err := Open(context.Background(), bytes.NewReader(comp), o)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, s)
		if err != nil || n != rawLen {
			b.Fatalf("read %d of %d: %v", n, rawLen, err)
		}
		s.Close()
	}
}

func BenchmarkDecode(b *testing.B) {
	raw := benchData(b)
	const rawLen = 64 << 20
	gz := raw + ".gz"
	compressFile(b, raw, gz, "gzip", "-6")
	zst := raw + ".zst"
	compressFile(b, raw, zst, "zstd", "-q", "-3")
	xzs := raw + ".xz"
	compressFile(b, raw, xzs, "xz", "-6", "-T1") // one block
	xzm := raw + ".mt.xz"
	compressFile(b, raw, xzm, "xz", "-6", "-T2", "--block-size=1MiB")
	b.Run("gzip", func(b *testing.B) { benchDecode(b, gz, rawLen, Options{}) })
	b.Run("zstd", func(b *testing.B) { benchDecode(b, zst, rawLen, Options{}) })
	b.Run("xz-1block/external", func(b *testing.B) { benchDecode(b, xzs, rawLen, Options{ExternalXZ: needTool(b, "xz")}) })
	b.Run("xz-1block/go", func(b *testing.B) { benchDecode(b, xzs, rawLen, Options{ExternalXZ: "-"}) })
	b.Run("xz-multiblock/external", func(b *testing.B) { benchDecode(b, xzm, rawLen, Options{ExternalXZ: needTool(b, "xz")}) })
	b.Run("xz-multiblock/go", func(b *testing.B) { benchDecode(b, xzm, rawLen, Options{ExternalXZ: "-"}) })
}

// BenchmarkGzipLibraries compares the gzip decoder we use (klauspost) with
// pgzip on the same file, outside Open.
func BenchmarkGzipLibraries(b *testing.B) {
	raw := benchData(b)
	gz := raw + ".gz"
	compressFile(b, raw, gz, "gzip", "-6")
	comp, err := os.ReadFile(gz)
	if err != nil {
		b.Fatal(err)
	}
	for name, open := range map[string]func(io.Reader) (io.Reader, error){
		"klauspost": func(r io.Reader) (io.Reader, error) { return kgzip.NewReader(r) },
		"pgzip":     func(r io.Reader) (io.Reader, error) { return pgzip.NewReader(r) },
	} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(64 << 20)
			for b.Loop() {
				r, err := open(bytes.NewReader(comp))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

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

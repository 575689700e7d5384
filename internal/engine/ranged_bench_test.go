package engine

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/internal/iostage"
	"github.com/diskimport/engine/internal/testimg"
	"github.com/diskimport/engine/qemu"
)

// BenchmarkRangedConvert measures the read side of the ranged route:
// qemu-img converting a qcow2 (plain and with compressed clusters) served
// over HTTP on 127.0.0.1 through our NBD export onto a file, with each
// variant of the export interleaved in every iteration. Reported: median
// milliseconds and HTTP requests per variant.
//
//	go test -run '^$' -bench RangedConvert -benchtime 5x ./internal/engine
func BenchmarkRangedConvert(b *testing.B) {
	testimg.Need(b, "qemu-img")
	const size = 256 << 20
	dir := b.TempDir()
	raw := testimg.Raw(b, dir, "disk.raw", size, 21)
	www := filepath.Join(dir, "www")
	if err := os.Mkdir(www, 0o755); err != nil {
		b.Fatal(err)
	}
	testimg.Convert(b, raw, filepath.Join(www, "disk.qcow2"), "qcow2")
	testimg.Run(b, "qemu-img", "convert", "-q", "-c", "-f", "raw", "-O", "qcow2", raw, filepath.Join(www, "c.qcow2"))
	var requests atomic.Int64
	fs := http.FileServer(http.Dir(www))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		fs.ServeHTTP(w, r)
	}))
	b.Cleanup(srv.Close)
	base := srv.URL + "/"
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	runner := &qemu.Runner{Logger: log}
	variants := []struct {
		name     string
		ahead    bool
		parallel int
	}{
		{"plain-m8", false, 0},
		{"readahead-m8", true, 0},
		{"readahead-m16", true, 16},
	}
	for _, img := range []string{"disk.qcow2", "c.qcow2"} {
		b.Run(img, func(b *testing.B) {
			times := map[string][]time.Duration{}
			reqs := map[string]int64{}
			b.SetBytes(size)
			for b.Loop() {
				for _, v := range variants {
					out := filepath.Join(b.TempDir(), "out.raw")
					start := time.Now()
					before := requests.Load()
					convertRanged(b, runner, base+img, out, v.ahead, v.parallel, log)
					times[v.name] = append(times[v.name], time.Since(start))
					reqs[v.name] = requests.Load() - before
				}
			}
			for _, v := range variants {
				b.ReportMetric(float64(median(times[v.name]))/1e6, v.name+"-ms")
				b.ReportMetric(float64(reqs[v.name]), v.name+"-requests")
			}
		})
	}
}

func convertRanged(b *testing.B, runner *qemu.Runner, url, out string, ahead bool, parallel int, log *slog.Logger) {
	ctx := context.Background()
	src, err := datasource.New(url, datasource.Config{})
	if err != nil {
		b.Fatal(err)
	}
	st, err := src.Open(ctx)
	if err != nil {
		b.Fatal(err)
	}
	st.Body.Close()
	r := st.Ranges
	if r == nil {
		b.Fatal("no ranges")
	}
	wire := &iostage.RangeCounter{}
	e, err := startRangedExportWith(ctx, r, wire, log, ahead)
	if err != nil {
		b.Fatal(err)
	}
	defer e.stop(log)
	if _, err := runner.Convert(ctx, e.spec(), out, qemu.ConvertOptions{SrcFormat: "qcow2", DstFormat: "raw", CacheMode: "writeback", Parallel: parallel}); err != nil {
		b.Fatal(fmt.Errorf("%w", e.cause(err)))
	}
	os.Remove(out)
}

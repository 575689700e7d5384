package imagetest

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/diskimport/engine/internal/testkit/podmantest"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

const (
	slowDiskSize  = 24 << 20
	slowChunk     = 256 << 10
	slowChunkWait = 40 * time.Millisecond // ~6 MiB/s: about four seconds
	ownerUID      = "0b7c6a9e-metric-imagetest"
)

// TestProgressMetric scrapes the importer pod's progress metric over
// HTTPS during a slow import, with the regular expression CDI's
// controller uses: a percentage for our owner UID that never goes back,
// seen strictly between 0 and 100, and never 100 (the controller sets
// 100 when the pod succeeds; the pod stops serving before).
func TestProgressMetric(t *testing.T) {
	img := loadImage(t)
	if help := img.podman.Run(podmantest.Container{Image: img.id, Args: []string{"--help"}}, quickTimeout); !strings.Contains(help.Stdout, "--metrics-listen") {
		t.Skip("issue 11: this importer serves no progress metric yet (no --metrics-listen)")
	}
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", slowDiskSize, 29)
	srv := httptest.NewServer(slowFile(raw))
	t.Cleanup(srv.Close)
	data := volumeDir(t, dir, "data")
	termLog := terminationLog(t, dir)
	metrics := freeLocalAddr(t)

	env := withEnv(controllerEnv(t, srv.URL+"/disk.raw"),
		"IMPORTER_METRICS_LISTEN="+metrics, "OWNER_UID="+ownerUID, "IMPORTER_IMAGE_SIZE="+strconv.Itoa(slowDiskSize))
	name := img.podman.Start(podmantest.Container{
		Image:      img.id,
		Args:       cdiArgs,
		Env:        env,
		Volumes:    []string{data + ":/data", termLog + ":/dev/termination-log"},
		HostNet:    true,
		CapDropAll: true,
	})
	// CDI's controller does not verify the pod's self-signed certificate.
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	var values []float64
	done := make(chan int)
	go func() { done <- img.podman.Wait(name) }()
	tick := time.NewTicker(150 * time.Millisecond)
	defer tick.Stop()
	var code int
scrape:
	for {
		select {
		case code = <-done:
			break scrape
		case <-tick.C:
			if v, ok := scrapeProgress(client, "https://"+metrics+"/metrics"); ok {
				values = append(values, v)
			}
		}
	}
	if code != 0 {
		t.Fatalf("importer exited %d\n%s", code, img.podman.Logs(name))
	}
	t.Logf("progress seen: %v", values)
	var between bool
	for i, v := range values {
		if i > 0 && v < values[i-1] {
			t.Errorf("progress went back from %v to %v", values[i-1], v)
		}
		between = between || (v > 0 && v < 100)
	}
	if !between {
		t.Errorf("never saw a percentage between 0 and 100 during a slow import: %v", values)
	}
	if slices.Contains(values, 100) {
		t.Errorf("a scrape read 100: the metrics server outlived the import's end: %v", values)
	}
	if got, want := testimg.Digest(t, filepath.Join(data, "disk.img"), -1), testimg.Digest(t, raw, -1); got != want {
		t.Errorf("disk.img: sha256 %s, want %s", got, want)
	}
}

// scrapeProgress reads the progress of ownerUID as CDI's controller does
// (pkg/importer/..., the exact regular expression).
func scrapeProgress(client *http.Client, url string) (float64, bool) {
	re := regexp.MustCompile(`(kubevirt_cdi_import_progress_total|kubevirt_cdi_clone_progress_total)\{ownerUID="` + regexp.QuoteMeta(ownerUID) + `"\} (\d{1,3}\.?\d*)`)
	resp, err := client.Get(url)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false
	}
	m := re.FindSubmatch(body)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(m[2]), 64)
	return v, err == nil
}

// slowFile serves one file at a few MiB/s, without ranges, so an import
// of it lasts long enough to watch.
func slowFile(p string) http.Handler {
	var mu sync.Mutex // one download at a time keeps the rate
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		f, err := os.Open(p)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer f.Close()
		info, err := f.Stat()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(info.Size(), 10))
		buf := make([]byte, slowChunk)
		for {
			n, err := f.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return
				}
				w.(http.Flusher).Flush()
				time.Sleep(slowChunkWait)
			}
			if err != nil {
				return
			}
		}
	})
}

package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// During a slow import, a client scraping the pod as CDI's controller does
// (HTTPS, its exact regular expression, the pod's OWNER_UID) reads a
// percentage that rises and never falls; never 100, which the controller
// sets itself when the pod succeeds (the pod waits for no last scrape).
func TestPodProgressMetric(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 6<<20, 62)
	data, err := os.ReadFile(raw)
	require.NoError(t, err)
	srv := pacedServer(t, data, 128<<10, 100*time.Millisecond, 0) // about 1.3 MB/s: 5 s
	certPEM, keyPEM, pool := testCertificate(t)
	port := freePort(t)
	const owner = "7c4f1b0e-2a3d-4e5f-9a8b-0c1d2e3f4a5b"
	volume := t.TempDir()
	rp := startPod(t, pod{
		env: httpEnv(srv.URL+"/disk.raw", map[string]string{
			"OWNER_UID":               owner,
			"IMPORTER_METRICS_LISTEN": "127.0.0.1:" + port,
			"TLS_CERT":                certPEM,
			"TLS_KEY":                 keyPEM,
			"TLS_MIN_VERSION":         "VersionTLS12",
			"TLS_CIPHERS":             "ECDHE-RSA-AES128-GCM-SHA256,ECDHE-ECDSA-AES128-GCM-SHA256",
		}),
		volumes: map[string]string{"/data": volume},
	})

	// The controller's client: it skips verification; ours checks that the
	// certificate is TLS_CERT's.
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "example.com"},
	}}
	var seen []float64
	otherOwner := false
	for scraping := true; scraping; {
		select {
		case <-rp.done:
			scraping = false
		case <-time.After(100 * time.Millisecond):
		}
		body, err := scrapeOnce(client, "https://127.0.0.1:"+port+"/metrics")
		if err != nil {
			continue // not listening yet, or gone
		}
		if v := cdiProgress(body, owner); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			seen = append(seen, f)
		}
		otherOwner = otherOwner || cdiProgress(body, "someone-else") != ""
	}
	require.Equal(t, cdi.ExitOK, rp.wait(t))
	t.Logf("percentages scraped: %v", seen)
	require.NotEmpty(t, seen)
	assert.False(t, otherOwner, "only the pod's owner is reported")
	for i := 1; i < len(seen); i++ {
		assert.GreaterOrEqual(t, seen[i], seen[i-1], "the percentage went back at scrape %d: %v", i, seen)
	}
	rising := 0
	for _, v := range seen {
		if v > 0 && v < 100 {
			rising++
		}
	}
	assert.GreaterOrEqual(t, rising, 3, "several percentages between 0 and 100 while it ran: %v", seen)
	assert.NotContains(t, seen, 100.0, "the server stops before the final value is set")
	assert.Regexp(t, `msg=Progress phase=TransferDataFile percent=\d+\.\d\d read=\d+`, rp.stderr.String(),
		"off a terminal, the log shows progress lines")
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, filepath.Join(volume, "disk.img"), 6<<20))
}

// cdiProgress reads the progress of ownerUID from a scrape with the
// regular expression of CDI's controller (pkg/controller/common/util.go,
// GetProgressReportFromURL), built the way it builds it.
func cdiProgress(body, ownerUID string) string {
	metricExp := "kubevirt_cdi_import_progress_total|kubevirt_cdi_clone_progress_total"
	re := regexp.MustCompile(fmt.Sprintf("(%s)\\{ownerUID\\=%q\\} (\\d{1,3}\\.?\\d*)", metricExp, ownerUID))
	if m := re.FindStringSubmatch(body); m != nil {
		return m[len(m)-1]
	}
	return ""
}

func scrapeOnce(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// freePort returns a port of 127.0.0.1 nobody listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	_, port, err := net.SplitHostPort(freeAddr(t))
	require.NoError(t, err)
	return port
}

// testCertificate returns a self-signed server certificate (httptest's, for
// example.com and 127.0.0.1) as PEM, and a pool trusting it.
func testCertificate(t *testing.T) (certPEM, keyPEM string, pool *x509.CertPool) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.StartTLS() // httptest's certificate: example.com, 127.0.0.1
	srv.Close()
	c := srv.TLS.Certificates[0]
	certPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}))
	der, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	require.NoError(t, err)
	keyPEM = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	pool = x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM([]byte(certPEM)))
	return certPEM, keyPEM, pool
}

// The command line serves the same metrics with --metrics-listen.
func TestCLIMetricsListen(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 2<<20, 63)
	data, err := os.ReadFile(raw)
	require.NoError(t, err)
	srv := pacedServer(t, data, 128<<10, 100*time.Millisecond, 0) // 1.6 s
	port := freePort(t)
	dest := filepath.Join(dir, "out.img")
	done := make(chan int, 1)
	go func() {
		code, _, _ := runCLI(t, nil, env(nil), "--metrics-listen", "127.0.0.1:"+port, "--owner-uid", "cli-owner", srv.URL+"/disk.raw", dest)
		done <- code
	}()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // as CDI's controller scrapes
	}}
	var last string
	for running := true; running; {
		select {
		case code := <-done:
			require.Equal(t, cdi.ExitOK, code)
			running = false
		case <-time.After(100 * time.Millisecond):
		}
		if body, err := scrapeOnce(client, "https://127.0.0.1:"+port+"/metrics"); err == nil {
			if v := cdiProgress(body, "cli-owner"); v != "" {
				last = v
			}
		}
	}
	assert.NotEmpty(t, last, "the progress was served")
	assert.NotEqual(t, "100", last, "the server stops before the final value is set")
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, dest, -1))
}

// finish of a complete import stops the metrics server before it sets
// 100, so nothing waits for a scrape of the final value (CDI's controller
// sets 100% itself when the pod succeeds): a client scraping without pause
// all along never reads 100, and the port is closed once finish returns.
// A server that waited for a last scrape would have answered one with 100.
func TestFinishStopsMetricsBeforeTheFinalValue(t *testing.T) {
	o := &progressOutputs{tracker: cdi.NewProgressTracker()}
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	o.start(cdi.MetricsConfig{Listen: "127.0.0.1:0", OwnerUID: "owner"}, log, log, true)
	require.NotNil(t, o.server, "the metrics server started")
	addr := o.server.Addr()
	o.observe(importer.Progress{Phase: "TransferDataFile", BytesRead: 50, SourceSize: 100, Percent: 50})

	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // as CDI's controller scrapes
	}}
	var (
		mu     sync.Mutex
		seen   []string
		stop   = make(chan struct{})
		done   = make(chan struct{})
		served = make(chan struct{})
	)
	go func() {
		defer close(done)
		first := true
		for {
			select {
			case <-stop:
				return
			default:
			}
			if body, err := scrapeOnce(client, "https://"+addr+"/metrics"); err == nil {
				mu.Lock()
				seen = append(seen, cdiProgress(body, "owner"))
				mu.Unlock()
				if first {
					close(served)
					first = false
				}
			}
		}
	}()
	<-served
	o.finish(&importer.Result{}, nil)
	close(stop)
	<-done

	assert.Equal(t, 100.0, o.tracker.State().Percent, "the import is recorded complete")
	mu.Lock()
	defer mu.Unlock()
	assert.NotEmpty(t, seen)
	assert.NotContains(t, seen, "100", "a scrape read the final value: the server outlived it")
	_, err := net.DialTimeout("tcp", addr, time.Second)
	assert.Error(t, err, "the metrics port is closed when finish returns")
}

package cdi

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/diskimport/engine/importer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// controllerProgress reads the progress of ownerUID from a scrape exactly
// as CDI's controller does (pkg/controller/common/util.go,
// GetProgressReportFromURL): "" when the line is not there.
func controllerProgress(body, ownerUID string) string {
	metricExp := "kubevirt_cdi_import_progress_total|kubevirt_cdi_clone_progress_total"
	re := regexp.MustCompile(fmt.Sprintf("(%s)\\{ownerUID\\=%q\\} (\\d{1,3}\\.?\\d*)", metricExp, ownerUID))
	m := re.FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return m[len(m)-1]
}

func TestProgressTrackerIsOneMonotonicPercentage(t *testing.T) {
	clock := time.Unix(0, 0)
	tr := newProgressTracker(func() time.Time { return clock })
	step := func(phase importer.Phase, read, size int64, pct float64) float64 {
		clock = clock.Add(time.Second)
		tr.Observe(importer.Progress{Phase: phase, BytesRead: read, SourceSize: size, Percent: pct})
		return tr.State().Percent
	}
	clock = clock.Add(time.Second)
	tr.Observe(importer.Progress{Phase: "Info", BytesRead: 10, SourceSize: 100, Percent: -1})
	assert.Equal(t, 10.0, tr.State().ReadRate, "the first rate counts from the start, a second ago")
	assert.Equal(t, 20.0, step("TransferScratch", 40, 100, 20))
	assert.Equal(t, 30.0, tr.State().ReadRate, "30 bytes in the second since the last snapshot")
	assert.Equal(t, 75.0, step("Convert", 100, 100, 75))
	assert.Equal(t, 75.0, step("Convert", 100, 100, 10), "never backwards")
	assert.Equal(t, 99.99, step("Commit", 100, 100, 99.99), "the engine's percentage below Complete, as it is")
	assert.Equal(t, 99.99, step("Complete", 100, 100, 100), "100 only once the import returned")
	tr.Complete()
	assert.Equal(t, 100.0, tr.State().Percent)
	assert.Equal(t, 100.0, step("Complete", 100, 100, 100))

	direct := NewProgressTracker()
	direct.Observe(importer.Progress{Phase: "TransferDataFile", Percent: 33.333333})
	assert.Equal(t, 33.33, direct.State().Percent, "two decimals")
	direct.Observe(importer.Progress{Phase: "TransferDataFile", Percent: 0.000001})
	assert.Equal(t, 33.33, direct.State().Percent)
}

func TestFloorHundredthNeverWritesAnExponent(t *testing.T) {
	tr := NewProgressTracker()
	tr.Observe(importer.Progress{Phase: "TransferDataFile", Percent: 0.00001})
	body := scrape(t, NewMetricsHandler(tr, "u"))
	assert.Equal(t, "0", controllerProgress(body, "u"), body)
}

// scrape serves one GET of h and returns the body.
func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	srv, err := StartMetricsServer(MetricsConfig{Listen: "127.0.0.1:0"}, h)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Stop() })
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // as the controller scrapes
	resp, err := c.Get("https://" + srv.Addr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func TestMetricsHandlerServesCDIsLineAndOurs(t *testing.T) {
	tr := NewProgressTracker()
	tr.Observe(importer.Progress{Phase: "TransferDataFile", BytesRead: 420, SourceSize: 1000, BytesWritten: 410, Percent: 42})
	tr.SetRetries(3)
	body := scrape(t, NewMetricsHandler(tr, "b856691e-1038-11e9-a5ab-525500d15501"))
	t.Log(body)
	assert.Equal(t, "42", controllerProgress(body, "b856691e-1038-11e9-a5ab-525500d15501"))
	assert.Equal(t, "", controllerProgress(body, "another-owner"))
	assert.Contains(t, body, `kubevirt_cdi_import_progress_total{ownerUID="b856691e-1038-11e9-a5ab-525500d15501"} 42`+"\n",
		"ownerUID is the metric's only label")
	for _, line := range []string{
		"diskimport_read_bytes 420", "diskimport_written_bytes 410", "diskimport_source_size_bytes 1000",
		"diskimport_retries 3", `diskimport_phase{phase="TransferDataFile"} 1`, `diskimport_phase{phase="Convert"} 0`,
		"diskimport_read_bytes_per_second ",
	} {
		assert.Contains(t, body, line)
	}
	assert.NotContains(t, body, "go_goroutines", "a registry of our own, not the global one")
	tr.Complete()
	assert.Equal(t, "100", controllerProgress(scrape(t, NewMetricsHandler(tr, "u")), "u"))
}

func TestMetricsServerTLSPolicy(t *testing.T) {
	_, ciphers, warnings, err := tlsPolicy(envOf(map[string]string{"TLS_CIPHERS": "ECDHE-RSA-AES128-GCM-SHA256, TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,NO-SUCH-CIPHER"}))
	require.NoError(t, err)
	assert.Equal(t, []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}, ciphers)
	require.Len(t, warnings, 1)
	assert.Contains(t, warnings[0], "NO-SUCH-CIPHER")

	c, _, err := metricsConfig(envOf(map[string]string{"TLS_MIN_VERSION": "VersionTLS13"}))
	require.NoError(t, err)
	assert.Equal(t, DefaultMetricsAddr, c.Listen)
	c.Listen = "127.0.0.1:0"
	srv, err := StartMetricsServer(c, NewMetricsHandler(NewProgressTracker(), ""))
	require.NoError(t, err)
	t.Cleanup(func() { srv.Stop() })
	old := &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12} //nolint:gosec // a test client
	_, err = tls.Dial("tcp", srv.Addr(), old)
	assert.Error(t, err, "TLS_MIN_VERSION=VersionTLS13 refuses TLS 1.2")
	conn, err := tls.Dial("tcp", srv.Addr(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a test client
	require.NoError(t, err)
	assert.Equal(t, uint16(tls.VersionTLS13), conn.ConnectionState().Version)
	assert.Equal(t, "importer-metrics", conn.ConnectionState().PeerCertificates[0].Subject.CommonName, "self-signed, made at start")
	conn.Close()
}

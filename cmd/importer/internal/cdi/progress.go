package cdi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/big"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ProgressState is what ProgressTracker knows of a running import.
type ProgressState struct {
	Phase string
	// Percent is CDI's progress: of the whole import, never going back,
	// 100 only once it is complete.
	Percent      float64
	BytesRead    int64
	BytesWritten int64
	SourceSize   int64 // -1 when unknown
	// ReadRate is the bytes read per second over the last interval.
	ReadRate float64
	Retries  int
}

// ProgressTracker follows an import through the engine's snapshots
// (importer.Options.Progress); the metrics and the progress log read it.
// The engine reports one percentage of the whole import, never going back
// and below 100 until Complete (importer.Progress); the tracker cuts it to
// CDI's two decimals and takes 100 only from Complete, once the import
// returned, as CDI's controller shows it (it sets 100 itself when the pod
// succeeds, and a last scrape must not race it).
type ProgressTracker struct {
	mu       sync.Mutex
	now      func() time.Time
	state    ProgressState
	lastRead int64
	lastAt   time.Time
}

// NewProgressTracker returns a tracker at 0%, created as the import
// starts (the first rate counts from then).
func NewProgressTracker() *ProgressTracker { return newProgressTracker(time.Now) }

func newProgressTracker(now func() time.Time) *ProgressTracker {
	return &ProgressTracker{now: now, lastAt: now(), state: ProgressState{SourceSize: -1}}
}

// minRateInterval keeps the rate from being measured over a few
// milliseconds (the engine reports at every phase change too).
const minRateInterval = 500 * time.Millisecond

// Observe takes one snapshot of the engine's.
func (t *ProgressTracker) Observe(p importer.Progress) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if dt := now.Sub(t.lastAt); dt >= minRateInterval {
		t.state.ReadRate = max(0, float64(p.BytesRead-t.lastRead)/dt.Seconds())
		t.lastRead, t.lastAt = p.BytesRead, now
	}
	t.state.Phase = string(p.Phase)
	t.state.BytesRead, t.state.BytesWritten, t.state.SourceSize = p.BytesRead, p.BytesWritten, p.SourceSize
	if v := p.Percent; v > t.state.Percent && p.Phase != importer.PhaseComplete {
		t.state.Percent = floorHundredth(v)
	}
}

// Complete marks the import complete (the engine returned success: the
// image is on stable storage): 100%.
func (t *ProgressTracker) Complete() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.state.Percent = 100
	t.state.Phase = "Complete"
}

// SetRetries records the retries of the finished import.
func (t *ProgressTracker) SetRetries(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.state.Retries = n
}

// State returns the current state.
func (t *ProgressTracker) State() ProgressState {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.state
}

// floorHundredth cuts v to two decimals, CDI's precision. Prometheus
// writes a float in its shortest form, which below 0.0001 is exponent
// notation ("1e-05") that the controller's regular expression would read
// as 1; two decimals never are.
func floorHundredth(v float64) float64 {
	return math.Floor(v*100) / 100
}

// ProgressLogInterval is how often ProgressLog writes a line.
const ProgressLogInterval = 3 * time.Second

// ProgressLog writes the tracker's state as a log line every interval, for
// logs read off a terminal (kubectl logs), as CDI's importer logs its
// percentage.
type ProgressLog struct {
	tracker  *ProgressTracker
	log      *slog.Logger
	interval time.Duration
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
}

// StartProgressLog starts logging; Stop ends it.
func StartProgressLog(tracker *ProgressTracker, log *slog.Logger, interval time.Duration) *ProgressLog {
	l := &ProgressLog{tracker: tracker, log: log, interval: interval, stop: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	return l
}

func (l *ProgressLog) run() {
	defer close(l.done)
	tick := time.NewTicker(l.interval)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
			s := l.tracker.State()
			if s.Phase == "" {
				continue // no snapshot yet
			}
			l.log.Info("Progress", "phase", s.Phase, "percent", fmt.Sprintf("%.2f", s.Percent),
				"read", s.BytesRead, "written", s.BytesWritten, "sourceSize", s.SourceSize,
				"bytesPerSecond", int64(s.ReadRate))
		}
	}
}

// Stop ends the log lines.
func (l *ProgressLog) Stop() {
	l.once.Do(func() { close(l.stop) })
	<-l.done
}

// ProgressMetricName is the metric CDI's controller scrapes from an
// importer pod, matching
// `(kubevirt_cdi_import_progress_total|kubevirt_cdi_clone_progress_total)\{ownerUID="UID"\} (\d{1,3}\.?\d*)`:
// its only label is ownerUID, its value the percentage done.
const ProgressMetricName = "kubevirt_cdi_import_progress_total"

// NewMetricsHandler serves the tracker's state as Prometheus metrics from
// a registry of its own: CDI's progress metric for ownerUID, and this
// engine's under diskimport_ names (extra labels on CDI's metric would
// break the controller's match).
func NewMetricsHandler(tracker *ProgressTracker, ownerUID string) http.Handler {
	reg := prometheus.NewRegistry()
	gauge := func(name, help string, value func(ProgressState) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return value(tracker.State()) })
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        ProgressMetricName,
			Help:        "The import progress in percentage",
			ConstLabels: prometheus.Labels{"ownerUID": ownerUID},
		}, func() float64 { return tracker.State().Percent }),
		gauge("diskimport_read_bytes", "Bytes received from the source so far (as sent, compressed).",
			func(s ProgressState) float64 { return float64(s.BytesRead) }),
		gauge("diskimport_written_bytes", "Image bytes written by the current phase (to scratch space or the target).",
			func(s ProgressState) float64 { return float64(s.BytesWritten) }),
		gauge("diskimport_source_size_bytes", "Size of the source as it announced it; -1 when unknown.",
			func(s ProgressState) float64 { return float64(s.SourceSize) }),
		gauge("diskimport_read_bytes_per_second", "Bytes received from the source per second, over the last interval.",
			func(s ProgressState) float64 { return s.ReadRate }),
		gauge("diskimport_retries", "Requests re-sent after a failure; known once the import ends.",
			func(s ProgressState) float64 { return float64(s.Retries) }),
	)
	for _, phase := range importer.Phases() {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "diskimport_phase",
			Help:        "1 for the phase the import is in, 0 for the others.",
			ConstLabels: prometheus.Labels{"phase": string(phase)},
		}, func() float64 {
			if tracker.State().Phase == string(phase) {
				return 1
			}
			return 0
		}))
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}

// DefaultMetricsAddr is where CDI's controller scrapes an importer pod
// (the container port named "metrics").
const DefaultMetricsAddr = ":8443"

// MetricsConfig is how the progress metric is served.
type MetricsConfig struct {
	// Listen is IMPORTER_METRICS_LISTEN (ours), default DefaultMetricsAddr;
	// "off" serves nothing.
	Listen string
	// OwnerUID is OWNER_UID, the only label of CDI's progress metric: the
	// controller finds its own DataVolume's line by it.
	OwnerUID string
	// Certificate is TLS_CERT/TLS_KEY (PEM text) when given; nil means a
	// self-signed certificate made at start, as CDI's importer does (the
	// controller does not verify it).
	Certificate *tls.Certificate
	// MinVersion and CipherSuites are TLS_MIN_VERSION and TLS_CIPHERS.
	MinVersion   uint16
	CipherSuites []uint16
}

// Enabled reports whether the metrics are to be served.
func (c MetricsConfig) Enabled() bool { return c.Listen != "off" }

func metricsConfig(getenv func(string) string) (MetricsConfig, []string, error) {
	c := MetricsConfig{Listen: getenv("IMPORTER_METRICS_LISTEN"), OwnerUID: getenv("OWNER_UID")}
	if c.Listen == "" {
		c.Listen = DefaultMetricsAddr
	}
	var warnings []string
	var err error
	if c.MinVersion, c.CipherSuites, warnings, err = tlsPolicy(getenv); err != nil {
		return c, nil, err
	}
	if certPEM, keyPEM := getenv("TLS_CERT"), getenv("TLS_KEY"); certPEM != "" || keyPEM != "" {
		pair, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
		if err != nil {
			return c, nil, fmt.Errorf("TLS_CERT/TLS_KEY: %w: %w", err, errdefs.ErrInvalidOptions)
		}
		c.Certificate = &pair
	}
	return c, warnings, nil
}

// MetricsServer serves the metrics over HTTPS, as CDI's importer does on
// :8443 (every path answers, as there).
type MetricsServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// StartMetricsServer listens at c.Listen and serves h with c's certificate,
// or one made now and signed by itself: CDI's controller scrapes the pod
// without verifying it. The caller stops it with Stop.
func StartMetricsServer(c MetricsConfig, h http.Handler) (*MetricsServer, error) {
	cert := c.Certificate
	if cert == nil {
		self, err := selfSignedCertificate()
		if err != nil {
			return nil, fmt.Errorf("making the metrics server's certificate: %w", err)
		}
		cert = &self
	}
	tlsConf := &tls.Config{
		Certificates: []tls.Certificate{*cert},
		MinVersion:   c.MinVersion,
		CipherSuites: c.CipherSuites,
	}
	if tlsConf.MinVersion == 0 {
		tlsConf.MinVersion = tls.VersionTLS12
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return nil, fmt.Errorf("metrics server: %w", err)
	}
	s := &MetricsServer{ln: ln, done: make(chan error, 1)}
	s.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConf}
	go func() { s.done <- s.srv.ServeTLS(ln, "", "") }()
	return s, nil
}

// Addr is the address the server listens at (the port chosen for ":0").
func (s *MetricsServer) Addr() string { return s.ln.Addr().String() }

// Stop closes the server, letting a scrape in flight finish for a moment.
func (s *MetricsServer) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if serveErr := <-s.done; !errors.Is(serveErr, http.ErrServerClosed) && err == nil {
		err = serveErr
	}
	return err
}

// selfSignedCertificate makes an ECDSA P-256 certificate valid for a year.
func selfSignedCertificate() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "importer-metrics"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

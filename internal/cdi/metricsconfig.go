package cdi

import (
	"crypto/tls"
	"fmt"

	"github.com/diskimport/engine/errdefs"
)

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

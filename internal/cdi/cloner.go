package cdi

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/diskimport/engine/errdefs"
)

// CloneProgressMetricName is the progress metric of CDI's cloner pod
// (the controller's expression matches it beside the importer's).
const CloneProgressMetricName = "kubevirt_cdi_clone_progress_total"

// ClonerConfig is CDI's cloner pod environment (cmd/cdi-cloner and its
// cloner_startup.sh).
type ClonerConfig struct {
	// VolumeMode is VOLUME_MODE: "block" or "filesystem".
	VolumeMode string
	// MountPoint is MOUNT_POINT: the block device, or the mounted volume.
	MountPoint string
	// UploadURL is UPLOAD_URL, the target's upload server path.
	UploadURL string
	// TLS carries CLIENT_CERT/CLIENT_KEY (the client certificate) and
	// SERVER_CA_CERT (the CA the server's certificate must chain to), all
	// PEM text.
	TLS *tls.Config
	// OwnerUID is OWNER_UID, the progress metric's label.
	OwnerUID      string
	Preallocation bool
	// TerminationLog is where the termination message goes.
	TerminationLog string
}

// ContentType is the clone stream's x-cdi-content-type for the volume mode.
func (c ClonerConfig) ContentType() string {
	if c.VolumeMode == "block" {
		return "blockdevice-clone"
	}
	return "filesystem-clone"
}

// ClonerFromEnv reads CDI's cloner environment. Like CDI's cloner, every
// variable but PREALLOCATION is required.
func ClonerFromEnv(getenv func(string) string) (ClonerConfig, error) {
	c := ClonerConfig{
		VolumeMode:     getenv("VOLUME_MODE"),
		MountPoint:     getenv("MOUNT_POINT"),
		UploadURL:      getenv("UPLOAD_URL"),
		OwnerUID:       getenv("OWNER_UID"),
		TerminationLog: PathsFromEnv(getenv).TerminationLog,
	}
	for name, v := range map[string]string{"VOLUME_MODE": c.VolumeMode, "MOUNT_POINT": c.MountPoint, "UPLOAD_URL": c.UploadURL} {
		if v == "" {
			return c, fmt.Errorf("%s missing: %w", name, errdefs.ErrInvalidOptions)
		}
	}
	if c.VolumeMode != "block" && c.VolumeMode != "filesystem" {
		return c, fmt.Errorf("VOLUME_MODE=%q: want block or filesystem: %w", c.VolumeMode, errdefs.ErrInvalidOptions)
	}
	var err error
	if c.Preallocation, err = envBool(getenv, "PREALLOCATION"); err != nil {
		return c, err
	}
	c.TLS, err = ClonerTLS([]byte(getenv("CLIENT_CERT")), []byte(getenv("CLIENT_KEY")), []byte(getenv("SERVER_CA_CERT")))
	return c, err
}

// ClonerTLS is the cloner's client TLS configuration from PEM text: its
// certificate, and the CA that signed the upload server's.
func ClonerTLS(certPEM, keyPEM, serverCAPEM []byte) (*tls.Config, error) {
	if len(certPEM) == 0 || len(keyPEM) == 0 || len(serverCAPEM) == 0 {
		return nil, fmt.Errorf("CLIENT_CERT, CLIENT_KEY and SERVER_CA_CERT are all required (mutual TLS): %w", errdefs.ErrInvalidOptions)
	}
	return ClientTLS(certPEM, keyPEM, serverCAPEM)
}

// ClientTLS is the TLS configuration of a client of an upload server from
// PEM text: the certificate and key it presents (both or neither) and the
// CA that signed the server's (none: the system's pool).
func ClientTLS(certPEM, keyPEM, serverCAPEM []byte) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(certPEM) > 0 || len(keyPEM) > 0 {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("client certificate and key: %w: %w", err, errdefs.ErrInvalidOptions)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	if len(serverCAPEM) > 0 {
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(serverCAPEM) {
			return nil, fmt.Errorf("the server CA holds no PEM certificate: %w", errdefs.ErrInvalidOptions)
		}
	}
	return c, nil
}

// NewCloneMetricsHandler serves the cloner's progress (a percentage from
// percent) as CDI's clone metric for ownerUID.
func NewCloneMetricsHandler(percent func() float64, ownerUID string) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name:        CloneProgressMetricName,
		Help:        "The clone progress in percentage",
		ConstLabels: prometheus.Labels{"ownerUID": ownerUID},
	}, percent))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}

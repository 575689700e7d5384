package cdi

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/uploadserver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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

// CDI's upload server pod: the controller starts the upload server image
// with this environment (cmd/cdi-uploadserver) and reads the termination
// message it leaves.
const (
	// DefaultUploadListenAddress and DefaultUploadListenPort are CDI's
	// defaults for LISTEN_ADDRESS and LISTEN_PORT.
	DefaultUploadListenAddress = "0.0.0.0"
	DefaultUploadListenPort    = 8443
	// MessageDeadlinePassed is the upload server's termination message
	// when its DEADLINE passed (the completed ones are package
	// uploadserver's, which answers with them too).
	MessageDeadlinePassed = "Deadline Passed"
)

// UploadServerConfig is CDI's upload-server pod environment.
type UploadServerConfig struct {
	// Listen is LISTEN_ADDRESS:LISTEN_PORT.
	Listen string
	// Destination is DESTINATION: the block device path, or the image file
	// of a filesystem volume (default /data/disk.img, under
	// IMPORTER_PATH_PREFIX when set).
	Destination string
	// TargetOptions are how each uploaded image is written, handed to
	// the import whole: Size is UPLOAD_IMAGE_SIZE in bytes (0: none),
	// FilesystemOverhead and Preallocation the variables of those names,
	// ScratchDir and NoScratch the volume mounted at /scratch, or none (as
	// for the importer's pod, useScratchVolume).
	importer.TargetOptions
	// Deadline is DEADLINE (RFC 3339); zero means none. When it passes
	// with no upload complete, the server exits and says so.
	Deadline time.Time
	// CertFile and KeyFile are TLS_CERT_FILE and TLS_KEY_FILE, the server
	// certificate.
	CertFile, KeyFile string
	// ClientCAFile is CLIENT_CERT_FILE: the CA a client certificate must
	// chain to; ClientName (CLIENT_NAME) is the name it must carry.
	ClientCAFile, ClientName string
	// MinVersion and CipherSuites are TLS_MIN_VERSION and TLS_CIPHERS.
	MinVersion   uint16
	CipherSuites []uint16
	// Warnings about the environment, to be logged.
	Warnings []string
	// TerminationLog is where the termination message goes.
	TerminationLog string
}

// UploadServerFromEnv reads CDI's upload-server environment. Values CDI
// would ignore when malformed (a bad port, a bad boolean) are refused here:
// guessing a listen port or a preallocation wrongly is worse than stopping.
func UploadServerFromEnv(getenv func(string) string) (UploadServerConfig, error) {
	paths := PathsFromEnv(getenv)
	c := UploadServerConfig{
		Destination:    getenv("DESTINATION"),
		CertFile:       getenv("TLS_CERT_FILE"),
		KeyFile:        getenv("TLS_KEY_FILE"),
		ClientCAFile:   getenv("CLIENT_CERT_FILE"),
		ClientName:     getenv("CLIENT_NAME"),
		TerminationLog: paths.TerminationLog,
	}
	if c.Destination == "" {
		c.Destination = paths.DataFile
	}
	// CDI's LISTEN_ADDRESS="" also means every interface, as the default.
	addr := DefaultUploadListenAddress
	if v := getenv("LISTEN_ADDRESS"); v != "" {
		addr = v
	}
	port := DefaultUploadListenPort
	if v := getenv("LISTEN_PORT"); v != "" {
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil {
			return c, fmt.Errorf("LISTEN_PORT=%q: want a port number: %w", v, errdefs.ErrInvalidOptions)
		}
		port = int(n)
	}
	c.Listen = net.JoinHostPort(addr, strconv.Itoa(port))
	var err error
	if c.Size, err = envQuantity(getenv, "UPLOAD_IMAGE_SIZE"); err != nil {
		return c, err
	}
	if c.FilesystemOverhead, err = envFloat(getenv, "FILESYSTEM_OVERHEAD"); err != nil {
		return c, err
	}
	if c.Preallocation, err = envBool(getenv, "PREALLOCATION"); err != nil {
		return c, err
	}
	if v := getenv("DEADLINE"); v != "" {
		if c.Deadline, err = time.Parse(time.RFC3339, v); err != nil {
			return c, fmt.Errorf("DEADLINE=%q: want an RFC 3339 time: %w", v, errdefs.ErrInvalidOptions)
		}
	}
	if c.CertFile == "" || c.KeyFile == "" {
		// As CDI's: its pod always has a certificate, and an upload server
		// without one would take any client's bytes.
		return c, fmt.Errorf("TLS_CERT_FILE and TLS_KEY_FILE are required: %w", errdefs.ErrInvalidOptions)
	}
	if c.MinVersion, c.CipherSuites, c.Warnings, err = tlsPolicy(getenv); err != nil {
		return c, err
	}
	var scratch importer.Options
	if w := useScratchVolume(&scratch, paths); w != "" {
		c.Warnings = append(c.Warnings, w)
	}
	c.ScratchDir, c.NoScratch = scratch.ScratchDir, scratch.NoScratch
	return c, nil
}

// UploadTerminationMessage is the upload server's termination message:
// Upload Complete or Clone Complete with the import's fields.
func UploadTerminationMessage(m TerminationMessage, clone bool) TerminationMessage {
	m.Message = uploadserver.MessageUploadComplete
	if clone {
		m.Message = uploadserver.MessageCloneComplete
	}
	return m
}

// DeadlineMessage is the termination message of an upload server whose
// DEADLINE passed with no upload complete, CDI's exact text.
func DeadlineMessage() []byte {
	return []byte(`{"deadlinePassed":true,"message":"` + MessageDeadlinePassed + `"}`)
}

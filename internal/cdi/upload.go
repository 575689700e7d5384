package cdi

import (
	"crypto/tls"
	"fmt"
	"os"
	"strings"

	"github.com/diskimport/engine/errdefs"
)

// UploadConfig is how IMPORTER_SOURCE=upload serves CDI's upload paths.
type UploadConfig struct {
	// Listen is IMPORTER_UPLOAD_LISTEN; empty means the upload server's
	// default, CDI's :8443.
	Listen string
	// TLS carries the certificate of TLS_CERT and TLS_KEY (PEM text, as CDI's
	// upload server takes them); nil means plain HTTP.
	TLS *tls.Config
	// Token is the bearer token every request must present, read from the
	// file IMPORTER_UPLOAD_TOKEN_FILE names; empty means none.
	Token string
}

func uploadConfig(getenv func(string) string) (UploadConfig, error) {
	c := UploadConfig{Listen: getenv("IMPORTER_UPLOAD_LISTEN")}
	if certPEM, keyPEM := getenv("TLS_CERT"), getenv("TLS_KEY"); certPEM != "" || keyPEM != "" {
		pair, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
		if err != nil {
			return c, fmt.Errorf("TLS_CERT/TLS_KEY: %w: %w", err, errdefs.ErrInvalidOptions)
		}
		c.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	}
	if p := getenv("IMPORTER_UPLOAD_TOKEN_FILE"); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			return c, fmt.Errorf("IMPORTER_UPLOAD_TOKEN_FILE: %w: %w", err, errdefs.ErrInvalidOptions)
		}
		c.Token = strings.TrimSpace(string(b))
	}
	return c, nil
}

package datasource

import (
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/diskimport/engine/errdefs"
)

// certPool returns the system pool plus every certificate in every
// non-hidden file in dir, whatever its name: like CDI, since a ConfigMap
// key may be named ca.pem, tls.crt or ca-bundle. A file with no PEM
// certificate is skipped with a warning. A Kubernetes configmap mount holds
// symlinks into a "..data" directory, so entries are followed with os.Stat
// rather than judged by their dirent type.
func certPool(dir string, log *slog.Logger) (*x509.CertPool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading certificate directory %s: %w: %w", dir, errdefs.ErrInvalidOptions, err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		log.Warn("system certificate pool unavailable, using only the certificate directory", "dir", dir, "error", err)
		pool = x509.NewCertPool()
	}
	added := 0
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading certificate %s: %w: %w", p, errdefs.ErrInvalidOptions, err)
		}
		if !pool.AppendCertsFromPEM(data) {
			log.Warn("no PEM certificate found in file", "path", p)
			continue
		}
		added++
	}
	if added == 0 {
		return nil, fmt.Errorf("certificate directory %s holds no file with a parsable PEM certificate: %w", dir, errdefs.ErrInvalidOptions)
	}
	return pool, nil
}

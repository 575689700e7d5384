package cdi

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/diskimport/engine/errdefs"
)

// checkHTTPEndpoint accepts only an http or https URL with a host, as CDI's
// http source does. The engine itself also reads local files and file://
// URLs, and in a pod that would copy the pod's own files (service-account
// tokens under /var/run/secrets, say) into the volume. The error names the
// scheme, never the whole endpoint, which may carry credentials.
func checkHTTPEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil {
		return fmt.Errorf("IMPORTER_SOURCE=http: IMPORTER_ENDPOINT is not a valid URL: %w", errdefs.ErrInvalidOptions)
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
	case "":
		return fmt.Errorf("IMPORTER_SOURCE=http: IMPORTER_ENDPOINT is a path, not an http or https URL: %w", errdefs.ErrInvalidOptions)
	default:
		return fmt.Errorf("IMPORTER_SOURCE=http: IMPORTER_ENDPOINT has scheme %q, want http or https: %w", u.Scheme, errdefs.ErrInvalidOptions)
	}
	if u.Host == "" {
		return fmt.Errorf("IMPORTER_SOURCE=http: IMPORTER_ENDPOINT has no host: %w", errdefs.ErrInvalidOptions)
	}
	return nil
}

// checkClonePath accepts only an absolute path for IMPORTER_SOURCE=clone:
// the source volume is mounted into the pod at a fixed place, and a
// relative path or a URL would read something else.
func checkClonePath(endpoint string) error {
	if !filepath.IsAbs(endpoint) {
		return fmt.Errorf("IMPORTER_SOURCE=clone: IMPORTER_ENDPOINT %q must be an absolute path to a block device or image file: %w", endpoint, errdefs.ErrInvalidOptions)
	}
	return nil
}

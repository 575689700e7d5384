package cdi

import (
	"fmt"
	"strings"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
)

// objectStoreEndpoint maps CDI's IMPORTER_ENDPOINT of an s3 or gcs source
// to the engine's endpoint: CDI gives S3 objects as
// http(s)://host/bucket/key (path style, region from an amazonaws.com host
// name) and GCS objects as gs://bucket/object or
// https://storage.googleapis.com/bucket/object; the engine names them
// s3+http(s):// and gs+https:// so the registry picks the object-store
// source rather than plain HTTP. s3:// and gs:// pass as they are. The
// credentials stay where they were read: IMPORTER_ACCESS_KEY_ID and
// IMPORTER_SECRET_KEY for S3, GOOGLE_APPLICATION_CREDENTIALS for GCS.
func objectStoreEndpoint(source, endpoint string) (string, error) {
	lower := strings.ToLower(endpoint)
	switch {
	case source == "s3" && strings.HasPrefix(lower, "s3://"),
		source == "gcs" && strings.HasPrefix(lower, "gs://"):
		return endpoint, nil
	case strings.HasPrefix(lower, "http://"), strings.HasPrefix(lower, "https://"):
		if source == "s3" {
			return "s3+" + endpoint, nil
		}
		return "gs+" + endpoint, nil
	}
	want := "http(s)://host/bucket/key or s3://bucket/key"
	if source == "gcs" {
		want = "gs://bucket/object or https://storage.googleapis.com/bucket/object"
	}
	return "", fmt.Errorf("IMPORTER_ENDPOINT %q of an %s source is not %s: %w", datasource.RedactURL(endpoint), source, want, errdefs.ErrInvalidOptions)
}

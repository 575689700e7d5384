package importer

import (
	"context"
	"fmt"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
)

// ResolveDigest returns the manifest digest a container-image reference
// (docker://, oci-archive:, oci:) resolves to, reading no layer: for a
// multi-platform image, the index's digest. A poller (CDI's DataImportCron)
// compares it with the last import to decide whether to import again.
// Only the source fields of o (credentials, TLS, registry settings,
// Logger) are used.
func ResolveDigest(ctx context.Context, source string, o Options) (string, error) {
	if !datasource.IsContainerImageRef(source) {
		return "", fmt.Errorf("%q is not a container image reference (docker://, oci-archive:, oci:): %w", source, errdefs.ErrInvalidOptions)
	}
	c, err := sourceConfig(o)
	if err != nil {
		return "", err
	}
	return datasource.ResolveDigest(ctx, source, c)
}

package datasource

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"strings"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/retry"
)

// Labeler is implemented by sources that carry labels for the imported
// volume (a registry image's KUBEVIRT_IO_ env vars). Labels is valid after
// a successful Open.
type Labeler interface {
	Labels() map[string]string
}

// Transport prefixes of container-image references.
const (
	dockerPrefix     = "docker://"
	ociArchivePrefix = "oci-archive:"
	ociLayoutPrefix  = "oci:"
	registryDiskDir  = "disk/"
)

// IsContainerImageRef reports whether ref names a container image
// (docker://, oci-archive: or oci:) rather than a URL or path.
func IsContainerImageRef(ref string) bool {
	l := strings.ToLower(ref)
	return strings.HasPrefix(l, dockerPrefix) || strings.HasPrefix(l, ociArchivePrefix) || strings.HasPrefix(l, ociLayoutPrefix)
}

type imageSource struct {
	ref    string
	conf   Config
	log    *slog.Logger
	labels map[string]string
	budget *retry.Budget // blob requests re-sent, every Open together
}

// NewContainerImage returns a source that streams the VM disk out of a
// containerdisk image (docker://, oci-archive: or oci:): the first regular
// file under disk/ in the image's layers, in manifest order. Every layer
// blob read is checked against its digest before the stream reports its
// end. A malformed docker reference fails here; anything else at Open.
func NewContainerImage(ref string, o Config) (Source, error) {
	if !IsContainerImageRef(ref) {
		return nil, fmt.Errorf("%q is not a container image reference (docker://, oci-archive: or oci:): %w", ref, errdefs.ErrInvalidOptions)
	}
	// oci-archive:/oci: paths are checked by Open (parsing already stats
	// them); a docker reference can be checked now.
	if strings.HasPrefix(strings.ToLower(ref), dockerPrefix) {
		if _, err := parseImageRef(ref); err != nil {
			return nil, err
		}
	}
	o.Logger = o.logger()
	return &imageSource{ref: ref, conf: o, log: o.Logger, budget: retry.NewBudget(o.retryPolicy(retryableBlobError))}, nil
}

func (s *imageSource) String() string { return s.ref }

// Retries reports how many layer-blob requests were re-sent after a
// failure (containers/image's own internal resume is not counted: it does
// not tell).
func (s *imageSource) Retries() int { return s.budget.Used() }

// Labels returns the labels derived from the image config (valid after
// Open).
func (s *imageSource) Labels() map[string]string { return maps.Clone(s.labels) }

func (o Config) arch() string {
	if o.Arch != "" {
		return o.Arch
	}
	return runtime.GOARCH
}

// ResolveDigest returns the digest of the manifest ref resolves to (the
// index's digest for a multi-platform image), without reading any layer: a
// poller compares it with the last imported one.
func ResolveDigest(ctx context.Context, ref string, o Config) (string, error) {
	o.Logger = o.logger()
	p, err := openImage(ctx, ref, o)
	if err != nil {
		return "", redactErrorURLs(err)
	}
	defer p.close()
	return p.topDigest.String(), nil
}

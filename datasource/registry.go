package datasource

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/diskimport/engine/errdefs"
)

// RegistryOptions configure a container-image source (docker://, oci-archive:,
// oci:). The zero value pulls anonymously with the library's usual lookups
// of auth files and registries.conf on this machine.
type RegistryOptions struct {
	// Username and Password authenticate to the registry. They win over
	// AuthFile.
	Username, Password string
	// AuthFile is a containers auth.json or docker config.json. "" lets
	// containers/image look in its default places (REGISTRY_AUTH_FILE,
	// $XDG_RUNTIME_DIR/containers/auth.json, ~/.docker/config.json).
	AuthFile string
	// CertDir holds CA certificates (*.crt or *.pem) and client
	// certificates (*.cert + *.key) for the registry.
	CertDir string
	// InsecureTLS skips certificate verification and allows plain HTTP.
	InsecureTLS bool
	// Arch picks the platform from an image index (default runtime.GOARCH).
	// When set explicitly, a single-platform image must match it too.
	Arch string
	// RegistriesConf is the registries.conf to use (mirrors, blocked and
	// insecure registries). "" uses the system's. When set, its drop-in
	// directory is RegistriesConf+".d" and the signature-storage directory
	// (registries.d) is the one next to it, so nothing else of the host is
	// read.
	RegistriesConf string
	// TempDir receives an oci-archive's extracted content and a copy of
	// CertDir when it holds *.pem files. Default: the system temp dir.
	TempDir string
	// Retries bounds how many times a failed layer-blob request or a
	// broken blob transfer is tried again, over the life of the source, on
	// top of containers/image's own single Range resume: 0 means 10, < 0
	// disables. RetryBackoff (0: 1 s) is the first delay, doubling with
	// jitter up to 30 s; RetryMaxElapsed (0: 5 minutes) bounds one streak
	// of failures with no byte received.
	Retries         int
	RetryBackoff    time.Duration
	RetryMaxElapsed time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Labeler is implemented by sources that carry labels for the imported
// volume (a registry image's KUBEVIRT_IO_ env vars). Labels is valid after
// a successful Open.
type Labeler interface {
	Labels() map[string]string
}

// Transport prefixes of container-image references.
const (
	dockerPrefix      = "docker://"
	ociArchivePrefix  = "oci-archive:"
	ociLayoutPrefix   = "oci:"
	registryDiskDir   = "disk/"
	kubevirtEnvMarker = "KUBEVIRT_IO_"
)

// IsRegistryRef reports whether ref names a container image (docker://,
// oci-archive: or oci:) rather than a URL or path.
func IsRegistryRef(ref string) bool {
	l := strings.ToLower(ref)
	return strings.HasPrefix(l, dockerPrefix) || strings.HasPrefix(l, ociArchivePrefix) || strings.HasPrefix(l, ociLayoutPrefix)
}

type registrySource struct {
	ref     string
	opts    RegistryOptions
	log     *slog.Logger
	labels  map[string]string
	retries atomic.Int64 // blob requests re-sent, every Open together
}

// NewRegistry returns a source that streams the VM disk out of a
// containerdisk image: the first regular file under disk/ in the image's
// layers, in manifest order. Every layer blob read is checked against its
// digest before the stream reports its end. Errors surface at Open.
func NewRegistry(ref string, o RegistryOptions) (Source, error) {
	if !IsRegistryRef(ref) {
		return nil, fmt.Errorf("%q is not a container image reference (docker://, oci-archive: or oci:): %w", ref, errdefs.ErrInvalidOptions)
	}
	// oci-archive:/oci: paths are checked by Open (parsing already stats
	// them); a docker reference can be checked now.
	if strings.HasPrefix(strings.ToLower(ref), dockerPrefix) {
		if _, err := parseImageRef(ref); err != nil {
			return nil, err
		}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &registrySource{ref: ref, opts: o, log: o.Logger}, nil
}

func (s *registrySource) String() string { return s.ref }

// Retries reports how many layer-blob requests were re-sent after a
// failure (containers/image's own internal resume is not counted: it does
// not tell).
func (s *registrySource) Retries() int { return int(s.retries.Load()) }

func (o RegistryOptions) retryPolicy() retryPolicy {
	return newRetryPolicy(HTTPOptions{Retries: o.Retries, RetryBackoff: o.RetryBackoff, RetryMaxElapsed: o.RetryMaxElapsed})
}

// Labels returns the labels derived from the image config (valid after
// Open).
func (s *registrySource) Labels() map[string]string { return maps.Clone(s.labels) }

func (o RegistryOptions) arch() string {
	if o.Arch != "" {
		return o.Arch
	}
	return runtime.GOARCH
}

// ResolveDigest returns the digest of the manifest ref resolves to (the
// index's digest for a multi-platform image), without reading any layer: a
// poller compares it with the last imported one.
func ResolveDigest(ctx context.Context, ref string, o RegistryOptions) (string, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	p, err := openImage(ctx, ref, o)
	if err != nil {
		return "", err
	}
	defer p.close()
	return p.topDigest.String(), nil
}

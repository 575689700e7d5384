package datasource

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/diskimport/engine/errdefs"
)

// An Opener builds the Source an endpoint names. It receives the endpoint
// whole (scheme included) and the import's Config, and should refuse a
// malformed endpoint or option now rather than at Open.
type Opener func(endpoint string, c Config) (Source, error)

// Keys of a Registry that are not URL schemes.
const (
	// StdinKey is the opener of the endpoint "-".
	StdinKey = "-"
	// PathKey is the opener of an endpoint without a scheme: a local path.
	PathKey = ""
)

// A Registry maps endpoint schemes to the openers of their sources. A
// scheme is registered with the separator its endpoints use: "https://" for
// URLs, "oci:" for references that have no authority ("oci:/dir:tag"), so
// that a file name holding a colon is not taken for a scheme. Builtin
// returns the engine's registry; a program may Register more on its own.
type Registry struct {
	openers map[string]Opener
}

// Builtin returns a Registry holding the engine's built-in sources, one
// line each.
func Builtin() *Registry {
	r := &Registry{openers: map[string]Opener{}}
	r.Register("http://", NewHTTP)
	r.Register("https://", NewHTTP)
	r.Register("docker://", NewContainerImage)
	r.Register("oci-archive:", NewContainerImage)
	r.Register("oci:", NewContainerImage)
	r.Register("file://", openFileURL)
	r.Register(s3Scheme, NewS3)
	r.Register(s3HTTPScheme, NewS3)
	r.Register(s3HTTPSScheme, NewS3)
	r.Register(gcsScheme, NewGCS)
	r.Register(gcsHTTPScheme, NewGCS)
	r.Register(gcsHTTPSScheme, NewGCS)
	r.Register(PathKey, openPath)
	r.Register(StdinKey, openStdin)
	return r
}

// Register makes o the opener of the endpoints starting with scheme
// ("s3://", case-insensitive), replacing any earlier one. StdinKey and
// PathKey name the two endpoints that have no scheme.
func (r *Registry) Register(scheme string, o Opener) {
	r.openers[strings.ToLower(scheme)] = o
}

// schemeRe matches a scheme prefix ("s3://", "oci:") as RFC 3986 defines
// scheme characters.
var schemeRe = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*):(//)?`)

// New builds the source of an endpoint written the way a command line or
// an IMPORTER_ENDPOINT value is: "-" is standard input, an endpoint with a
// registered scheme goes to its opener, and anything else without "://" is
// a local path. An unknown "scheme://" is refused, so that
// "s3://bucket/key" is never mistaken for a path.
func (r *Registry) New(endpoint string, c Config) (Source, error) {
	open, err := r.opener(endpoint)
	if err != nil {
		return nil, err
	}
	return open(endpoint, c)
}

func (r *Registry) opener(endpoint string) (Opener, error) {
	if endpoint == "" {
		return nil, fmt.Errorf("empty source endpoint: %w", errdefs.ErrInvalidOptions)
	}
	key := PathKey
	if endpoint == "-" {
		key = StdinKey
	} else if m := schemeRe.FindStringSubmatch(endpoint); m != nil {
		scheme := strings.ToLower(m[1])
		if o, ok := r.openers[scheme+"://"]; ok && m[2] != "" {
			return o, nil
		}
		if o, ok := r.openers[scheme+":"]; ok {
			return o, nil
		}
		if m[2] != "" {
			return nil, fmt.Errorf("%s:// sources are not supported (the sources are %s): %w", scheme, r.schemes(), errdefs.ErrInvalidOptions)
		}
		// Otherwise a colon in a file name ("disk:1.img").
	}
	o, ok := r.openers[key]
	if !ok {
		return nil, fmt.Errorf("source %q: no opener registered for it: %w", RedactURL(endpoint), errdefs.ErrInvalidOptions)
	}
	return o, nil
}

// schemes lists the registered schemes for a message: "docker://,
// file://, ..., a local path or - for standard input".
func (r *Registry) schemes() string {
	var names []string
	for k := range r.openers {
		if k != PathKey && k != StdinKey {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ", ") + ", a local path or - for standard input"
}

// New builds the source of an endpoint with the built-in Registry.
func New(endpoint string, c Config) (Source, error) { return Builtin().New(endpoint, c) }

func openStdin(string, Config) (Source, error) { return NewReader("standard input", os.Stdin), nil }

func openPath(path string, _ Config) (Source, error) { return NewFile(path), nil }

// openFileURL reads file:///abs/path.
func openFileURL(endpoint string, _ Config) (Source, error) {
	p := endpoint[len("file://"):]
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("file URL %q must hold an absolute path (file:///path): %w", RedactURL(endpoint), errdefs.ErrInvalidOptions)
	}
	return NewFile(p), nil
}

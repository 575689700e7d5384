package datasource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	digest "github.com/opencontainers/go-digest"
	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/image"
	"go.podman.io/image/v5/manifest"
	ociarchive "go.podman.io/image/v5/oci/archive"
	ocilayout "go.podman.io/image/v5/oci/layout"
	"go.podman.io/image/v5/types"

	"github.com/diskimport/engine/errdefs"
)

// pulledImage is an opened image: its source (kept open for GetBlob), the
// platform instance chosen, and what the config says.
type pulledImage struct {
	src       types.ImageSource
	img       types.Image
	sys       *types.SystemContext
	topDigest digest.Digest // the manifest the reference resolves to
	config    *imgspecv1.Image
	relay     *egressRelay // the pull's checked connections; nil without a policy or network
	cleanups  []func()
}

func (p *pulledImage) close() {
	if p.src != nil {
		p.src.Close()
		p.src = nil
	}
	for i := len(p.cleanups) - 1; i >= 0; i-- {
		p.cleanups[i]()
	}
	p.cleanups = nil
}

// parseImageRef turns docker://, oci-archive: and oci: strings into
// containers/image references with the transports themselves (no
// alltransports, which would link storage drivers and SQLite).
func parseImageRef(ref string) (types.ImageReference, error) {
	var (
		r   types.ImageReference
		err error
	)
	l := strings.ToLower(ref)
	switch {
	case strings.HasPrefix(l, dockerPrefix):
		r, err = docker.ParseReference("//" + ref[len(dockerPrefix):])
	case strings.HasPrefix(l, ociArchivePrefix):
		r, err = ociarchive.ParseReference(ref[len(ociArchivePrefix):])
	case strings.HasPrefix(l, ociLayoutPrefix):
		r, err = ocilayout.ParseReference(ref[len(ociLayoutPrefix):])
	default:
		return nil, fmt.Errorf("%q is not a container image reference: %w", ref, errdefs.ErrInvalidOptions)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("image %s: %w: %w", ref, errdefs.ErrSourceUnreachable, err)
	}
	if err != nil {
		return nil, fmt.Errorf("invalid image reference %q: %w: %w", ref, errdefs.ErrInvalidOptions, err)
	}
	return r, nil
}

// systemContext maps the options onto containers/image's knobs. The
// returned cleanup removes a temporary certificate directory.
func (o Config) systemContext() (*types.SystemContext, func(), error) {
	sys := &types.SystemContext{
		ArchitectureChoice:   o.arch(),
		OSChoice:             "linux",
		AuthFilePath:         o.AuthFile,
		BigFilesTemporaryDir: o.TempDir,
	}
	if o.RegistriesConf != "" {
		sys.SystemRegistriesConfPath = o.RegistriesConf
		// v5.42 wants a directory here; a missing one is fine.
		sys.SystemRegistriesConfDirPath = o.RegistriesConf + ".d"
		sys.RegistriesDirPath = filepath.Join(filepath.Dir(o.RegistriesConf), "registries.d")
	}
	if o.Username != "" || o.Password != "" {
		sys.DockerAuthConfig = &types.DockerAuthConfig{Username: o.Username, Password: o.Password}
	}
	if o.InsecureTLS {
		sys.DockerInsecureSkipTLSVerify = types.OptionalBoolTrue
		sys.OCIInsecureSkipTLSVerify = true
	}
	cleanup := func() {}
	if o.CertDir != "" {
		dir, c, err := crtDir(o.CertDir, o.TempDir)
		if err != nil {
			return nil, nil, err
		}
		sys.DockerCertPath, cleanup = dir, c
	}
	return sys, cleanup, nil
}

// crtDir returns a directory containers/image can use as DockerCertPath.
// It only loads CAs named *.crt, while CDI's (and our HTTP source's) cert
// directories may hold *.pem: then the files are linked into a temporary
// directory with *.pem renamed to *.crt.
func crtDir(dir, tmp string) (string, func(), error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", nil, fmt.Errorf("reading certificate directory %s: %w: %w", dir, errdefs.ErrInvalidOptions, err)
	}
	hasPEM := false
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".pem") && !strings.HasPrefix(e.Name(), ".") {
			hasPEM = true
		}
	}
	if !hasPEM {
		return dir, func() {}, nil
	}
	out, err := os.MkdirTemp(tmp, "importer-certs-*")
	if err != nil {
		return "", nil, fmt.Errorf("preparing certificate directory: %w", err)
	}
	cleanup := func() { os.RemoveAll(out) }
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		abs, err := filepath.Abs(filepath.Join(dir, name))
		if err != nil {
			cleanup()
			return "", nil, err
		}
		if fi, err := os.Stat(abs); err != nil || !fi.Mode().IsRegular() {
			continue // Kubernetes' ..data entries, subdirectories
		}
		link := name
		if base, ok := strings.CutSuffix(name, ".pem"); ok {
			link = base + "-pem.crt"
		}
		if err := os.Symlink(abs, filepath.Join(out, link)); err != nil {
			cleanup()
			return "", nil, fmt.Errorf("preparing certificate directory: %w", err)
		}
	}
	return out, cleanup, nil
}

// openImage resolves ref to one platform's image and reads its config.
func openImage(ctx context.Context, ref string, o Config) (*pulledImage, error) {
	r, err := parseImageRef(ref)
	if err != nil {
		return nil, err
	}
	sys, cleanup, err := o.systemContext()
	if err != nil {
		return nil, err
	}
	p := &pulledImage{sys: sys, cleanups: []func(){cleanup}}
	if o.Egress != nil && r.Transport().Name() == docker.Transport.Name() {
		if p.relay, err = startEgressRelay(o.Egress); err != nil {
			p.close()
			return nil, err
		}
		p.cleanups = append(p.cleanups, p.relay.close)
		sys.DockerProxy = p.relay.dockerProxy
	}
	src, err := r.NewImageSource(ctx, sys)
	if err != nil {
		p.close()
		return nil, p.pullError(ctx, ref, err)
	}
	p.src = src
	if err := p.choose(ctx, ref, o); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// choose picks the platform instance of an index and opens its manifest
// and config.
func (p *pulledImage) choose(ctx context.Context, ref string, o Config) error {
	raw, mime, err := p.src.GetManifest(ctx, nil)
	if err != nil {
		return p.pullError(ctx, ref, err)
	}
	if p.topDigest, err = manifest.Digest(raw); err != nil {
		return fmt.Errorf("image %s: digesting manifest: %w: %w", ref, errdefs.ErrInvalidImage, err)
	}
	var instance *digest.Digest
	if manifest.MIMETypeIsMultiImage(mime) {
		list, err := manifest.ListFromBlob(raw, mime)
		if err != nil {
			return fmt.Errorf("image %s: parsing image index: %w: %w", ref, errdefs.ErrInvalidImage, err)
		}
		d, err := list.ChooseInstance(p.sys)
		if err != nil {
			return fmt.Errorf("image %s has no linux/%s image; its index holds %s: %w",
				ref, o.arch(), strings.Join(platforms(list), ", "), errdefs.ErrUnsupportedFormat)
		}
		instance = &d
		if raw, _, err = p.src.GetManifest(ctx, instance); err != nil {
			return p.pullError(ctx, ref, err)
		}
	}
	if err := checkNotArtifact(ref, raw); err != nil {
		return err
	}
	img, err := image.FromUnparsedImage(ctx, p.sys, image.UnparsedInstance(p.src, instance))
	if err != nil {
		return p.pullError(ctx, ref, err)
	}
	p.img = img
	cfg, err := img.OCIConfig(ctx)
	if err != nil {
		return p.pullError(ctx, ref, err)
	}
	p.config = cfg
	if o.Arch != "" && cfg.Architecture != "" && cfg.Architecture != o.Arch {
		return fmt.Errorf("image %s is for %s, not the requested architecture %s: %w",
			ref, cfg.Architecture, o.Arch, errdefs.ErrUnsupportedFormat)
	}
	return nil
}

// checkNotArtifact refuses an OCI artifact (a manifest with an
// artifactType, or a config that is not an image config, such as a KubeVirt
// VM export whose layers are raw disks): it is no containerdisk, and
// containers/image would fail on it with an error that reads as an
// unreachable source, which a controller retries.
func checkNotArtifact(ref string, raw []byte) error {
	var m struct {
		ArtifactType string `json:"artifactType"`
		Config       struct {
			MediaType string `json:"mediaType"`
		} `json:"config"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return nil // containers/image reports a manifest it cannot parse
	}
	kind := m.ArtifactType
	switch m.Config.MediaType {
	case "", imgspecv1.MediaTypeImageConfig, manifest.DockerV2Schema2ConfigMediaType:
	default:
		if kind == "" {
			kind = m.Config.MediaType
		}
	}
	if kind != "" {
		return fmt.Errorf("image %s is an OCI artifact of type %s, not a containerdisk: %w", ref, kind, errdefs.ErrUnsupportedFormat)
	}
	return nil
}

// platforms names the instances of an index as os/arch[/variant].
func platforms(list manifest.List) []string {
	var out []string
	for _, d := range list.Instances() {
		u, err := list.Instance(d)
		if err != nil || u.ReadOnly.Platform == nil {
			out = append(out, "unknown platform ("+d.String()+")")
			continue
		}
		pl := u.ReadOnly.Platform
		s := pl.OS + "/" + pl.Architecture
		if pl.Variant != "" {
			s += "/" + pl.Variant
		}
		out = append(out, s)
	}
	return out
}

// pullError is pullError for this pull: a connection its relay refused is
// reported as the policy's refusal.
func (p *pulledImage) pullError(ctx context.Context, ref string, err error) error {
	return pullError(ctx, ref, p.relay.explain(err))
}

// pullError classifies a failure to reach or read the image: a refusal of
// the egress policy and refused credentials are ErrSourceRefused,
// everything else ErrSourceUnreachable.
func pullError(ctx context.Context, ref string, err error) error {
	var egress *errdefs.EgressError
	if errors.As(err, &egress) {
		return fmt.Errorf("failed to pull image %s: %w", ref, err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("failed to pull image %s: %w: %w", ref, errdefs.ErrCancelled, err)
	}
	// A token endpoint's 401 comes back as a typed error; a registry's
	// UNAUTHORIZED error code only in containers/image's text (see
	// permanentBlobError).
	var unauth docker.ErrUnauthorizedForCredentials
	if errors.As(err, &unauth) || strings.Contains(err.Error(), "unauthorized") {
		return fmt.Errorf("failed to pull image %s: %w: %w", ref, errdefs.ErrSourceRefused, err)
	}
	return fmt.Errorf("failed to pull image %s: %w: %w", ref, errdefs.ErrSourceUnreachable, err)
}

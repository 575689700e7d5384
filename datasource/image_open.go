package datasource

import (
	"context"
	"fmt"
	"strings"

	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/pkg/blobinfocache/memory"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/envlabels"
)

// Open resolves the image, refuses bootable-container images, and walks
// the layers in manifest order up to the first regular file under disk/,
// which becomes the stream. Layers before it are read whole (never
// written anywhere) and digest-checked.
func (s *imageSource) Open(ctx context.Context) (*Transfer, error) {
	t, err := s.open(ctx)
	return t, redactErrorURLs(err)
}

func (s *imageSource) open(ctx context.Context) (*Transfer, error) {
	p, err := openImage(ctx, s.ref, s.conf)
	if err != nil {
		return nil, err
	}
	if err := checkNotBootc(s.ref, p.config); err != nil {
		p.close()
		return nil, err
	}
	s.labels = envlabels.FromEnv(p.config.Config.Env)
	// An in-memory cache: the default one is SQLite under a system
	// directory (cgo), and nothing here is reused across runs anyway.
	cache := memory.New()
	for i, info := range p.img.LayerInfos() {
		s.log.Info("Processing layer", "image", s.ref, "index", i, "digest", info.Digest, "size", info.Size, "mediaType", info.MediaType)
		l, err := s.openLayer(ctx, p, info, cache)
		if err != nil {
			p.close()
			return nil, err
		}
		h, err := l.findDisk()
		if err == nil && h == nil {
			err = l.finish()
		}
		if err != nil {
			l.close()
			p.close()
			return nil, err
		}
		if h != nil {
			s.log.Info(fmt.Sprintf("File '%s' found in the layer", h.Name), "digest", info.Digest, "size", h.Size)
			return &Transfer{Body: &registryBody{ctx: ctx, layer: l, image: p}, Size: h.Size}, nil
		}
		l.close()
	}
	p.close()
	return nil, fmt.Errorf("failed to find a VM disk image file under disk/ in the container image %s: %w", s.ref, errdefs.ErrInvalidImage)
}

// checkNotBootc refuses bootable-container (bootc/ostree) images: their
// disk/ content, if any, is not a VM disk meant for import.
func checkNotBootc(ref string, cfg *imgspecv1.Image) error {
	for _, k := range []string{"containers.bootc", "ostree.bootable"} {
		switch strings.ToLower(cfg.Config.Labels[k]) {
		case "1", "true":
			return fmt.Errorf("image %s is a bootable container image (label %s=%s), not a containerdisk: %w",
				ref, k, cfg.Config.Labels[k], errdefs.ErrUnsafeImage)
		}
	}
	return nil
}

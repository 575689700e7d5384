package imagebuild

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"runtime"
	"strconv"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's labels (OCI annotation keys used as config labels).
const (
	LabelSource   = "org.opencontainers.image.source"
	LabelVersion  = "org.opencontainers.image.version"
	LabelRevision = "org.opencontainers.image.revision"
)

// MetricsPort is the HTTPS port of CDI's progress metric and of the
// upload server.
const MetricsPort = "8443/tcp"

// Image builds the image: the system layer, the project layer, and a
// config that runs the importer as r.UID.
func (r Recipe) Image(ctx context.Context) (v1.Image, error) {
	system, err := r.SystemTree(ctx)
	if err != nil {
		return nil, err
	}
	project, err := r.ProjectTree()
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, r.configFile())
	if err != nil {
		return nil, err
	}
	for _, l := range []struct {
		tree    *Tree
		comment string
	}{{system, systemLayerComment}, {project, projectLayerComment}} {
		layer, err := r.layer(l.tree)
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:     layer,
			MediaType: types.OCILayer,
			History:   v1.History{Created: v1.Time{Time: r.Created.UTC()}, CreatedBy: "imagebuild", Comment: l.comment},
		})
		if err != nil {
			return nil, err
		}
	}
	return img, nil
}

func (r Recipe) configFile() *v1.ConfigFile {
	user := strconv.Itoa(r.UID)
	entrypoint := r.Entrypoint
	if len(entrypoint) == 0 {
		entrypoint = []string{EntrypointPath}
	}
	search := r.Path
	if search == "" {
		search = "/usr/bin:/bin"
	}
	return &v1.ConfigFile{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Created:      v1.Time{Time: r.Created.UTC()},
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Entrypoint:   entrypoint,
			User:         user + ":" + user,
			Env:          []string{"PATH=" + search},
			WorkingDir:   "/",
			ExposedPorts: map[string]struct{}{MetricsPort: {}},
			Labels: map[string]string{
				LabelSource:   r.Source,
				LabelVersion:  r.Version,
				LabelRevision: r.Revision,
			},
		},
	}
}

// layer writes t as a tar, compresses it once with gzip's best level and
// wraps the bytes as a layer (go-containerregistry recognises them as
// compressed and does not compress again).
func (r Recipe) layer(t *Tree) (v1.Layer, error) {
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if err := t.WriteTar(zw, r.Created); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("imagebuild: compressing a layer: %w", err)
	}
	blob := gz.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(blob)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

package imagebuild

import (
	"archive/tar"
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// refNameAnnotation names an image in an OCI layout's index
// (podman's oci:DIR:NAME reference reads it).
const refNameAnnotation = "org.opencontainers.image.ref.name"

// WriteOCILayout replaces dir with an OCI image layout holding img once
// per name in names (tags such as "v1.2.3" and "latest"; the blobs are
// stored once).
func WriteOCILayout(dir string, img v1.Image, names []string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{refNameAnnotation: n})); err != nil {
			return fmt.Errorf("imagebuild: writing %s: %w", dir, err)
		}
	}
	return nil
}

// dockerArchiveManifest is one image in a docker-archive's manifest.json.
type dockerArchiveManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// WriteDockerArchive writes img as a docker-archive (what `podman load`
// and `docker load` read) tagged with every name in repoTags
// (e.g. localhost/diskimport/importer:v1.2.3). The file's bytes depend
// only on img, repoTags and mtime: the config, the layers in order, then
// manifest.json, each with fixed headers.
func WriteDockerArchive(file string, img v1.Image, repoTags []string, mtime time.Time) (err error) {
	tmp := file + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := writeDockerArchive(bw, img, repoTags, mtime); err != nil {
		return fmt.Errorf("imagebuild: writing %s: %w", file, err)
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

func writeDockerArchive(w io.Writer, img v1.Image, repoTags []string, mtime time.Time) error {
	tw := tar.NewWriter(w)
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	m := dockerArchiveManifest{Config: cfgName.Hex + ".json", RepoTags: slices.Clone(repoTags)}
	if err := writeArchiveFile(tw, m.Config, int64(len(cfg)), mtime, func(w io.Writer) error {
		_, err := w.Write(cfg)
		return err
	}); err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		size, err := l.Size()
		if err != nil {
			return err
		}
		name := d.Hex + ".tar.gz"
		m.Layers = append(m.Layers, name)
		if err := writeArchiveFile(tw, name, size, mtime, func(w io.Writer) error {
			rc, err := l.Compressed()
			if err != nil {
				return err
			}
			defer rc.Close()
			_, err = io.Copy(w, rc)
			return err
		}); err != nil {
			return err
		}
	}
	manifest, err := json.Marshal([]dockerArchiveManifest{m})
	if err != nil {
		return err
	}
	if err := writeArchiveFile(tw, "manifest.json", int64(len(manifest)), mtime, func(w io.Writer) error {
		_, err := w.Write(manifest)
		return err
	}); err != nil {
		return err
	}
	return tw.Close()
}

func writeArchiveFile(tw *tar.Writer, name string, size int64, mtime time.Time, body func(io.Writer) error) error {
	h := &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size, ModTime: mtime.UTC().Truncate(time.Second), Format: tar.FormatPAX}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	return body(tw)
}

// Summary is what a build prints.
type Summary struct {
	Digest         string  `json:"digest"`         // the OCI manifest's digest
	ConfigDigest   string  `json:"configDigest"`   // the image ID podman shows
	CompressedSize int64   `json:"compressedSize"` // manifest, config and compressed layers, as a registry stores them
	LayerSizes     []int64 `json:"layerSizes"`     // compressed, bottom first
}

// Summarize measures img.
func Summarize(img v1.Image) (Summary, error) {
	var s Summary
	d, err := img.Digest()
	if err != nil {
		return s, err
	}
	cfg, err := img.ConfigName()
	if err != nil {
		return s, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return s, err
	}
	m, err := img.Manifest()
	if err != nil {
		return s, err
	}
	s.Digest, s.ConfigDigest = d.String(), cfg.String()
	s.CompressedSize = int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		s.LayerSizes = append(s.LayerSizes, l.Size)
		s.CompressedSize += l.Size
	}
	return s, nil
}

// WriteJSON writes s to file (bin/importer-image.json), for tests and
// scripts that need the digest.
func (s Summary) WriteJSON(file string) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Clean(file), append(data, '\n'), 0o644)
}

package regtest

import (
	"archive/tar"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// OCILayout writes img into a new OCI layout directory under the tag and
// also packs that directory as an oci-archive tar. It returns both paths.
func OCILayout(t testing.TB, img v1.Image, tag string) (dir, archive string) {
	t.Helper()
	base := t.TempDir()
	dir = filepath.Join(base, "layout")
	p, err := layout.Write(dir, empty.Index)
	must(t, err)
	must(t, p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})))
	archive = filepath.Join(base, "image.tar")
	f, err := os.Create(archive)
	must(t, err)
	defer f.Close()
	tw := tar.NewWriter(f)
	must(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	}))
	must(t, tw.Close())
	return dir, archive
}

package imagetest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskimport/engine/internal/testkit/podmantest"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// TestStreamsDecodedByTheImagesChild imports a raw.gz and a raw.xz with
// the image as CDI's importer pod: the engine finds the image's decoder
// child on PATH and decodes with it (its debug log, on with CDI's -v=1,
// names the program): diskimport-inflate where make built it beside the
// image (bin/native, as make image takes it), igzip and xz otherwise; the
// volume holds the disk byte for byte.
func TestStreamsDecodedByTheImagesChild(t *testing.T) {
	img := loadImage(t)
	_, err := os.Stat(filepath.Join(img.dir, "native", "diskimport-inflate"))
	ringChild := err == nil
	for i, c := range []struct{ ext, codec, tool, maker string }{
		{"gz", "gzip", "/usr/bin/igzip", "gzip"},
		{"xz", "xz", "/usr/bin/xz", "xz"},
	} {
		t.Run(c.ext, func(t *testing.T) {
			want := c.tool
			if ringChild {
				want = "/usr/bin/diskimport-inflate"
			}
			testimg.Need(t, c.maker)
			dir := t.TempDir()
			served := filepath.Join(dir, "served")
			if err := os.Mkdir(served, 0o755); err != nil {
				t.Fatal(err)
			}
			raw := testimg.Raw(t, served, "disk.raw", diskSize, uint64(19+i))
			compressed := testimg.Compress(t, raw, c.ext)
			data := volumeDir(t, dir, "data")
			termLog := terminationLog(t, dir)
			r := img.podman.Run(podmantest.Container{
				Image:      img.id,
				Args:       cdiArgs,
				Env:        controllerEnv(t, testimg.Serve(t, served)+filepath.Base(compressed)),
				Volumes:    []string{data + ":/data", termLog + ":/dev/termination-log"},
				Groups:     []string{"107"},
				HostNet:    true,
				CapDropAll: true,
			}, importTimeout)
			if r.ExitCode != 0 {
				t.Fatalf("importer exited %d\n%s%s", r.ExitCode, r.Stdout, r.Stderr)
			}
			if !strings.Contains(r.Stderr, `msg="decoding `+c.codec+` with an external process" program=`+want) {
				t.Errorf("the %s stream was not decoded by the image's %s:\n%s", c.codec, want, r.Stderr)
			}
			if got, want := testimg.Digest(t, filepath.Join(data, "disk.img"), diskSize), testimg.Digest(t, raw, -1); got != want {
				t.Errorf("disk.img's first %d bytes: sha256 %s, want the source's %s", diskSize, got, want)
			}
			if m := readTermination(t, termLog); m.Message != "Import Complete" || m.Compression != c.ext {
				t.Errorf("termination message %+v, want Import Complete of a raw.%s", m, c.ext)
			}
		})
	}
}

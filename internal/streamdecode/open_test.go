package streamdecode

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// TestThroughFormatOpen is the seam the engine uses: format.Open peels
// the compression and replays the peeked head; the decoder reads on from
// the image's first byte.
func TestThroughFormatOpen(t *testing.T) {
	testimg.Need(t, "qemu-img", "gzip", "xz")
	dir := t.TempDir()
	raw := rawDisk(t, filepath.Join(dir, "disk.raw"), 16<<20, 35, 11)
	for _, c := range []struct{ name, fmt, comp string }{
		{"qcow2.gz", "qcow2", "gzip"}, {"qcow2-c.xz", "qcow2", "xz"}, {"vmdk.gz", "vmdk", "gzip"},
	} {
		t.Run(c.name, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "img")
			args := []string{"convert", "-q", "-f", "raw", "-O", c.fmt}
			if c.name == "qcow2-c.xz" {
				args = append(args, "-c")
			}
			if c.fmt == "vmdk" {
				args = append(args, "-o", "subformat=streamOptimized")
			}
			testimg.Run(t, "qemu-img", append(args, raw, img)...)
			want := reference(t, img, c.fmt)
			testimg.Run(t, c.comp, "-k", img)
			ext := map[string]string{"gzip": ".gz", "xz": ".xz"}[c.comp]
			f, err := os.Open(img + ext)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			ctx := context.Background()
			im, err := format.Open(ctx, f, format.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer im.Close()
			m := &memSink{t: t, b: make([]byte, im.Header.VirtualSize)}
			st, err := Decode(ctx, im, im.Format, m, Options{})
			if err != nil {
				t.Fatal(err)
			}
			sameBytes(t, m.b, want)
			t.Logf("%s: %d stream bytes, %d compressed, buffered peak %d", c.name, st.StreamBytes, st.Compressed, st.PeakBuffered)
		})
	}
}

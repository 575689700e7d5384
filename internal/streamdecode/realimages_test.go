package streamdecode

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/format"
)

// realImagesDir holds the shared corpus of real images (xz-compressed).
const realImagesDir = "../../../shared/real-images"

// TestRealImages decodes every qcow2 and vmdk of the corpus: where the
// structural checks and qemu-img accept an image, the decoder must give
// qemu-img's bytes or say ErrNotStreamable (fall back); where they refuse
// it, the decoder must refuse it too. It logs what each image needed
// buffered.
func TestRealImages(t *testing.T) {
	need(t, "qemu-img", "xz")
	var files []string
	for _, pat := range []string{"*/*.qcow2.xz", "*/*.vmdk.xz"} {
		m, _ := filepath.Glob(filepath.Join(realImagesDir, pat))
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Skip("no real images at " + realImagesDir)
	}
	for _, xzPath := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(xzPath, realImagesDir+"/"), ".xz")
		t.Run(name, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), filepath.Base(strings.TrimSuffix(xzPath, ".xz")))
			out, err := exec.Command("xz", "-dc", xzPath).Output()
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(img, out, 0o644); err != nil {
				t.Fatal(err)
			}
			accepted, size := checksAccept(t, img, out)
			m := &memSink{t: t, b: make([]byte, max(size, 0))}
			f := format.QCOW2
			if !bytes.HasPrefix(out, []byte("QFI\xfb")) {
				f = format.VMDK
			}
			st, err := Decode(context.Background(), bytes.NewReader(out), f, m, Options{})
			switch {
			case !accepted && err == nil:
				t.Fatalf("decoded an image the structural checks or qemu-img refuse")
			case !accepted:
				t.Logf("refused, as the checks do: %v", err)
			case errors.Is(err, errdefs.ErrNotStreamable):
				t.Logf("not streamable (fall back to scratch): %v", err)
			case err != nil:
				t.Fatalf("the checks and qemu-img accept it, the decoder says: %v", err)
			default:
				sameBytes(t, m.b, reference(t, img, string(f)))
				t.Logf("ok: stream %d bytes, data %d, compressed %d, buffered peak %d total %d", st.StreamBytes, st.DataBytes, st.Compressed, st.PeakBuffered, st.BufferedBytes)
			}
		})
	}
}

// checksAccept reports whether the header parser, the structural check
// and qemu-img all take the image, and its virtual size.
func checksAccept(t *testing.T, img string, b []byte) (bool, int64) {
	_, f, err := format.Detect(b[:min(len(b), format.DefaultPeekSize)])
	if err != nil || (f != format.QCOW2 && f != format.VMDK) {
		return false, 0
	}
	h, err := format.ParseHeader(f, b[:min(len(b), format.DefaultPeekSize)])
	if err != nil {
		return false, 0
	}
	check := format.CheckQCOW2
	if f == format.VMDK {
		check = format.CheckVMDK
	}
	if err := check(bytes.NewReader(b), int64(len(b))); err != nil {
		return false, 0
	}
	if err := exec.Command("qemu-img", "convert", "-q", "-f", string(f), "-O", "raw", img, filepath.Join(t.TempDir(), "x.raw")).Run(); err != nil {
		return false, 0
	}
	return true, h.VirtualSize
}

package streamdecode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// realImagesDir holds the shared corpus of real images (xz-compressed).
const realImagesDir = "../../../shared/real-images"

// realImagePatterns are the corpus files of the formats with a decoder.
var realImagePatterns = []string{"*/*.qcow2.xz", "*/*.vmdk.xz", "*/*.vhd.xz", "*/*.vdi.xz", "*/*.vhdx.xz", "*/*.avhdx.xz"}

// inMemoryMax: disks up to this size are decoded into memory and compared
// with qemu-img's raw byte for byte; larger ones (sparse disks of 127 GB)
// go to a sparse file that qemu-img compare checks against the image.
const inMemoryMax = 256 << 20

// TestRealImages decodes every image of the corpus in a format with a
// stream decoder: where the structural checks and qemu-img accept an
// image, the decoder must give qemu-img's bytes or say ErrNotStreamable
// (fall back); where they refuse it, the decoder must refuse it too. It
// logs what each image needed buffered. Images whose header says they
// have no decoder (a fixed VHD is raw data, a monolithicSparse vmdk...)
// are skipped.
func TestRealImages(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	var files []string
	for _, pat := range realImagePatterns {
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
			f, decodable := decodableFormat(out)
			if !decodable {
				t.Skipf("detected as %q: no stream decoder for it", f)
			}
			accepted, size := checksAccept(t, img, f, out)
			var sink Sink
			var file *os.File
			var m *memSink
			if !accepted || size <= inMemoryMax {
				m = &memSink{t: t, b: make([]byte, max(min(size, inMemoryMax), 0))}
				sink = m
			} else {
				file, err = os.Create(filepath.Join(t.TempDir(), "out.raw"))
				if err != nil {
					t.Fatal(err)
				}
				defer file.Close()
				sink = file
			}
			st, err := Decode(context.Background(), bytes.NewReader(out), f, sink, Options{})
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
				if q := qemuVirtualSize(t, img, f.QemuName()); st.VirtualSize != q {
					t.Fatalf("virtual size %d, qemu-img's %d", st.VirtualSize, q)
				}
				if m != nil {
					sameBytes(t, m.b, reference(t, img, f.QemuName()))
				} else {
					if err := file.Truncate(size); err != nil {
						t.Fatal(err)
					}
					testimg.Run(t, "qemu-img", "compare", "-q", "-f", "raw", "-F", f.QemuName(), file.Name(), img)
				}
				t.Logf("ok: virtual %d, stream %d bytes, data %d, compressed %d, buffered peak %d total %d", size, st.StreamBytes, st.DataBytes, st.Compressed, st.PeakBuffered, st.BufferedBytes)
			}
		})
	}
}

// decodableFormat detects b's format and says whether its header names a
// layout with a stream decoder.
func decodableFormat(b []byte) (format.Format, bool) {
	head := b[:min(len(b), format.DefaultPeekSize)]
	_, f, err := format.Detect(head)
	if err != nil {
		return f, false
	}
	h, err := format.ParseHeader(f, head)
	if err != nil {
		// Refused at the header: the decoder must refuse it too.
		return f, f == format.QCOW2 || f == format.VMDK || f == format.VHD || f == format.VDI
	}
	// VHDX has a decoder the engine does not route to yet (its virtual
	// size is not in the head, see DecodeVHDX).
	return f, f == format.VHDX || Supports(&format.Image{Format: f, Header: h})
}

// qemuVirtualSize is the virtual size qemu-img info reports.
func qemuVirtualSize(t *testing.T, img, qfmt string) int64 {
	out, err := exec.Command("qemu-img", "info", "--output=json", "-f", qfmt, img).Output()
	if err != nil {
		t.Fatalf("qemu-img info: %v", err)
	}
	var info struct {
		VirtualSize int64 `json:"virtual-size"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatal(err)
	}
	return info.VirtualSize
}

// checksAccept reports whether the header parser, the structural check
// and qemu-img all take the image, and its virtual size.
func checksAccept(t *testing.T, img string, f format.Format, b []byte) (bool, int64) {
	h, err := format.ParseHeader(f, b[:min(len(b), format.DefaultPeekSize)])
	if err != nil {
		return false, 0
	}
	if err := format.CheckStructure(f, bytes.NewReader(b), int64(len(b))); err != nil {
		return false, 0
	}
	if err := exec.Command("qemu-img", "convert", "-q", "-f", f.QemuName(), "-O", "raw", img, filepath.Join(t.TempDir(), "x.raw")).Run(); err != nil {
		return false, 0
	}
	if h.VirtualSize < 0 {
		// Not in the head (VHDX): qemu-img's.
		return true, qemuVirtualSize(t, img, f.QemuName())
	}
	return true, h.VirtualSize
}

package format

import (
	"bytes"
	"testing"
)

// Fuzz targets for the detection and structure checks added for issue 9:
// whatever the bytes, they answer (nil or an error) and never panic.

func FuzzDetect(f *testing.F) {
	for _, b := range seedImages(f, 64<<10) {
		f.Add(b[:min(len(b), DefaultPeekSize)])
	}
	f.Add(skippableFrame(0, []byte("x")))
	f.Add(append(skippableFrame(3, nil), magicZstd...))
	f.Add([]byte("QFI\xfb\x00\x00\x00\x01"))
	f.Add([]byte("WithouFreSpacExt"))
	f.Fuzz(func(t *testing.T, head []byte) {
		c, fm, err := Detect(head)
		if err == nil && (c == None) == (fm == "") {
			t.Fatalf("Detect must report exactly one of compression/format: %q %q", c, fm)
		}
		if len(head) >= DMGTrailerLen {
			_ = CheckTrailer(head)
		}
	})
}

func FuzzCheckVHD(f *testing.F) {
	seedStructure(f, "vhd")
	f.Fuzz(func(t *testing.T, img []byte) {
		_ = CheckVHD(bytes.NewReader(img), int64(len(img)))
	})
}

func FuzzCheckVDI(f *testing.F) {
	seedStructure(f, "vdi")
	f.Fuzz(func(t *testing.T, img []byte) {
		_ = CheckVDI(bytes.NewReader(img), int64(len(img)))
	})
}

func FuzzCheckVHDX(f *testing.F) {
	seedStructure(f, "vhdx")
	f.Fuzz(func(t *testing.T, img []byte) {
		_ = CheckVHDX(bytes.NewReader(img), int64(len(img)))
	})
}

// seedStructure adds the qemu-made image of that name (if any) and a few
// cuts of it to the corpus.
func seedStructure(f *testing.F, name string) {
	b, ok := seedImages(f, 16<<10)[name]
	if !ok {
		return
	}
	for _, n := range []int{len(b), len(b) - 1, len(b) / 2, 1536} {
		f.Add(b[:max(0, min(n, len(b)))])
	}
}

package format

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/testtar"
)

// seedImages builds small images of every format with qemu-img for the fuzz
// seed corpora; none when qemu-img is missing.
func seedImages(f *testing.F, rawSize int) map[string][]byte {
	out := map[string][]byte{}
	if _, err := exec.LookPath("qemu-img"); err != nil {
		return out
	}
	dir := f.TempDir()
	raw := filepath.Join(dir, "d.raw")
	writeRaw(f, raw, variedContent(rawSize, 14))
	for name, args := range map[string][]string{
		"qcow2":      {"-O", "qcow2", "-o", "cluster_size=512"},
		"qcow2c":     {"-O", "qcow2", "-c", "-o", "cluster_size=512"},
		"qcow2v2":    {"-O", "qcow2", "-o", "cluster_size=1024,compat=0.10"},
		"qcow2el2":   {"-O", "qcow2", "-o", "extended_l2=on,cluster_size=16k"},
		"qcow2zstd":  {"-O", "qcow2", "-c", "-o", "compression_type=zstd,cluster_size=512"},
		"vmdk":       {"-O", "vmdk"},
		"vmdkstream": {"-O", "vmdk", "-o", "subformat=streamOptimized"},
		"vhd":        {"-O", "vpc"},
		"vhdfixed":   {"-O", "vpc", "-o", "subformat=fixed"},
		"vhdx":       {"-O", "vhdx"},
		"vdi":        {"-O", "vdi"},
	} {
		p := filepath.Join(dir, name)
		cmd := append([]string{"convert", "-f", "raw"}, args...)
		run(f, "qemu-img", append(cmd, raw, p)...)
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		out[name] = b
	}
	return out
}

func FuzzSniff(f *testing.F) {
	for _, b := range seedImages(f, 128<<10) {
		f.Add(b[:min(len(b), DefaultPeekSize)])
	}
	f.Add([]byte{0x1f, 0x8b})
	f.Add(hugeDictXZ(40))
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd})
	f.Add([]byte("# Disk DescriptorFile\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, head []byte) {
		c, fm := Sniff(head)
		if (c == None) == (fm == "") {
			t.Fatalf("Sniff must report exactly one of compression/format: %q %q", c, fm)
		}
	})
}

var fuzzFormats = []Format{Raw, ISO, QCOW2, VMDK, VMDKDescriptor, VHD, VHDX, VDI}

func FuzzParseHeader(f *testing.F) {
	for _, b := range seedImages(f, 128<<10) {
		head := b[:min(len(b), DefaultPeekSize)]
		_, fm := Sniff(head)
		for i, x := range fuzzFormats {
			if x == fm {
				f.Add(head, uint8(i))
			}
		}
	}
	f.Fuzz(func(t *testing.T, head []byte, which uint8) {
		fm := fuzzFormats[int(which)%len(fuzzFormats)]
		h, err := ParseHeader(fm, head)
		if err == nil && h.Format != fm {
			t.Fatalf("header format %q, asked %q", h.Format, fm)
		}
		if err == nil && h.VirtualSize > DefaultMaxVirtualSize {
			t.Fatalf("accepted virtual size %d", h.VirtualSize)
		}
		_, _, _ = xzFirstDictSize(head)
		_ = IsFixedVHDFooter(head, int64(len(head)))
	})
}

func FuzzCheckQCOW2(f *testing.F) {
	for name, b := range seedImages(f, 16<<10) {
		if len(name) >= 5 && name[:5] == "qcow2" {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, img []byte) {
		_ = CheckQCOW2(bytes.NewReader(img), int64(len(img)))
	})
}

// FuzzOpenNotImage: whatever the bytes (tars of members of any kind, OVF
// descriptors, text, other magics), Open and a full read answer without
// panicking, an opened tar always names its member, and a refusal of a
// non-image is a NotImageError.
func FuzzOpenNotImage(f *testing.F) {
	disk := variedContent(64<<10, 18)[:4096] // small seeds: minimizing large ones takes the whole fuzz time
	f.Add(testtar.Build(f, []testtar.Member{testtar.File("disk.raw", disk)}))
	f.Add(testtar.Build(f, []testtar.Member{testtar.File("vm.ovf", ovfOf("d.vmdk")), testtar.File("d.vmdk", disk)}))
	f.Add(testtar.Build(f, []testtar.Member{testtar.File("a.txt", []byte("x y\n")), testtar.File("b", disk), testtar.File("c", disk)}))
	f.Add([]byte("<html><body>hello world</body></html>\n"))
	f.Add(append([]byte("BZh91AY&SY"), disk[:512]...))
	f.Add(append([]byte("PK\x03\x04"), disk[:512]...))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Open(context.Background(), bytes.NewReader(b), Options{MaxVirtualSize: 1 << 30})
		if err != nil {
			checkRefusal(t, err)
			return
		}
		defer s.Close()
		for _, c := range s.Compressions {
			if c == Tar && s.Member == "" {
				t.Fatal("a tar layer without a member name")
			}
		}
		// Bounded: a GNU sparse member of a few bytes may declare exabytes
		// of holes (the engine stops at the target's end).
		if _, err := io.CopyN(io.Discard, s, 16<<20); err != nil && err != io.EOF {
			checkRefusal(t, err)
		}
	})
}

func checkRefusal(t *testing.T, err error) {
	var ne *errdefs.NotImageError
	if errors.Is(err, errdefs.ErrTextNotImage) || errors.Is(err, errdefs.ErrNoDiskInArchive) || errors.Is(err, errdefs.ErrSeveralDisksInArchive) {
		if !errors.As(err, &ne) {
			t.Fatalf("a non-image refusal outside a NotImageError: %v", err)
		}
	}
}

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

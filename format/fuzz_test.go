package format

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
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

package imagebuild

import (
	"slices"
	"testing"
)

func TestParseLdd(t *testing.T) {
	out := `	linux-vdso.so.1 (0x00007ffd5b3f2000)
	libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x00007f8734057000)
	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f87336e1000)
	/lib64/ld-linux-x86-64.so.2 (0x00007f873418a000)
`
	libs, err := parseLdd([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/lib/x86_64-linux-gnu/libz.so.1", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}
	if !slices.Equal(libs, want) {
		t.Errorf("got %q, want %q", libs, want)
	}
	if _, err := parseLdd([]byte("\tlibgone.so.3 => not found\n")); err == nil {
		t.Error("a library ldd could not find was not an error")
	}
}

func TestParseDpkgSearch(t *testing.T) {
	out := "libc6:amd64: /lib64/ld-linux-x86-64.so.2\nqemu-utils, qemu-block-extra: /usr/share/doc\ndiversion by dash from: /bin/sh\n"
	got := parseDpkgSearch(out)
	want := []string{"libc6", "qemu-utils", "qemu-block-extra"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

package testimg

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// InflateChild is the diskimport-inflate program (native/inflate): the one
// on PATH (make test builds it into bin/native and puts that first), else
// built from native/inflate into a temporary directory when a C compiler
// and ISA-L's and liblzma's headers are here (apt-get install gcc
// libisal-dev liblzma-dev), else "" with the reason logged.
func InflateChild(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("diskimport-inflate"); err == nil {
		return p
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Logf("diskimport-inflate is not on PATH and there is no C compiler to build it: %v", err)
		return ""
	}
	for _, h := range []string{"/usr/include/isa-l.h", "/usr/include/lzma.h"} {
		if _, err := os.Stat(h); err != nil {
			t.Logf("diskimport-inflate is not on PATH and a library's headers are missing (apt-get install libisal-dev liblzma-dev): %v", err)
			return ""
		}
	}
	_, here, _, ok := runtime.Caller(0)
	if !ok {
		t.Log("diskimport-inflate: cannot find native/inflate from the test kit")
		return ""
	}
	srcs, err := filepath.Glob(filepath.Join(filepath.Dir(here), "..", "..", "..", "native", "inflate", "*.c"))
	if err != nil || len(srcs) == 0 {
		t.Fatalf("diskimport-inflate: no sources in native/inflate (%v)", err)
	}
	out := filepath.Join(t.TempDir(), "diskimport-inflate")
	args := append(append([]string{"-O2", "-Wall", "-Werror", "-o", out}, srcs...), "-lisal", "-llzma")
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("building diskimport-inflate: %v\n%s", err, b)
	}
	return out
}

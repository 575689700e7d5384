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
// and ISA-L's headers are here (apt-get install gcc libisal-dev), else ""
// with the reason logged.
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
	if _, err := os.Stat("/usr/include/isa-l.h"); err != nil {
		t.Logf("diskimport-inflate is not on PATH and ISA-L's headers are missing (apt-get install libisal-dev): %v", err)
		return ""
	}
	_, here, _, ok := runtime.Caller(0)
	if !ok {
		t.Log("diskimport-inflate: cannot find native/inflate from the test kit")
		return ""
	}
	src := filepath.Join(filepath.Dir(here), "..", "..", "..", "native", "inflate", "diskimport-inflate.c")
	out := filepath.Join(t.TempDir(), "diskimport-inflate")
	if b, err := exec.Command(cc, "-O2", "-Wall", "-Werror", "-o", out, src, "-lisal").CombinedOutput(); err != nil {
		t.Fatalf("building diskimport-inflate: %v\n%s", err, b)
	}
	return out
}

package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseLoaderTrace(t *testing.T) {
	out := `	linux-vdso.so.1 (0x00007ffd5b3f2000)
	libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x00007f8734057000)
	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f87336e1000)
	/lib64/ld-linux-x86-64.so.2 (0x00007f873418a000)
`
	libs, err := parseLoaderTrace([]byte(out))
	require.NoError(t, err)
	assert.Equal(t, []string{"/lib/x86_64-linux-gnu/libz.so.1", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}, libs)
	_, err = parseLoaderTrace([]byte("\tlibgone.so.3 => not found\n"))
	assert.Error(t, err, "a library the loader could not find")
}

func TestSharedLibrariesOfARealProgram(t *testing.T) {
	sh := program(t, "sh")
	libs, err := SharedLibraries(context.Background(), sh)
	require.NoError(t, err)
	require.NotEmpty(t, libs)
	interp, err := Interpreter(sh)
	require.NoError(t, err)
	assert.True(t, slices.Contains(libs, interp), "the interpreter %s is among %q", interp, libs)
	assert.True(t, slices.ContainsFunc(libs, func(l string) bool { return filepath.Base(l) == "libc.so.6" }), "libc among %q", libs)
	for _, l := range libs {
		_, err := os.Stat(l)
		assert.NoError(t, err)
	}

	// Our own (static) test binary has none.
	self, err := os.Executable()
	require.NoError(t, err)
	if static, _ := IsStatic(self); static {
		libs, err = SharedLibraries(context.Background(), self)
		require.NoError(t, err)
		assert.Empty(t, libs)
	}
}

func TestLoadedLibrariesOfASharedObjectWithoutInterpreter(t *testing.T) {
	sh := program(t, "sh")
	loader, err := Interpreter(sh)
	require.NoError(t, err)
	const lib = "/lib/x86_64-linux-gnu/libz.so.1" // Debian's zlib1g, needed by apt: on every machine here
	if _, err := os.Stat(lib); err != nil {
		t.Skipf("%s: %v", lib, err)
	}
	static, err := IsStatic(lib)
	require.NoError(t, err)
	require.True(t, static, "%s has no interpreter of its own", lib)
	none, err := SharedLibraries(context.Background(), lib)
	require.NoError(t, err)
	assert.Empty(t, none, "SharedLibraries asks the file's own interpreter only")

	libs, err := LoadedLibraries(context.Background(), loader, lib)
	require.NoError(t, err)
	assert.True(t, slices.ContainsFunc(libs, func(l string) bool { return filepath.Base(l) == "libc.so.6" }), "libc among %q", libs)
}

package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os/exec"
	"strings"
)

// SharedLibraries lists the files the dynamic loader maps to run the
// program at p: its interpreter and every library the loader resolves for
// it, as the loader names them (the paths it opens). A static program has
// none.
//
// The program's own interpreter (PT_INTERP) is asked, in trace mode
// (LD_TRACE_LOADED_OBJECTS, what ldd does), so no ldd script is needed
// where programs run (the importer's image has none) and the answer is
// the loader's own, glibc-hwcaps subdirectories and the cache included.
// The loader maps the libraries without running any of their code.
func SharedLibraries(ctx context.Context, p string) ([]string, error) {
	interp, err := Interpreter(p)
	if err != nil {
		return nil, err
	}
	if interp == "" {
		return nil, nil
	}
	return LoadedLibraries(ctx, interp, p)
}

// LoadedLibraries lists what the dynamic loader at loader maps for the
// ELF file at p, as SharedLibraries does; p may be a shared object with no
// interpreter of its own, such as a plugin a program opens with dlopen
// (nbdkit's), listed by the loader of that program.
func LoadedLibraries(ctx context.Context, loader, p string) ([]string, error) {
	cmd := exec.CommandContext(ctx, loader, p)
	cmd.Env = []string{"LD_TRACE_LOADED_OBJECTS=1", "LC_ALL=C"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("listing the shared libraries of %s with %s: %w: %s", p, loader, err, strings.TrimSpace(stderr.String()))
	}
	return parseLoaderTrace(out)
}

// Interpreter is the ELF interpreter the program at p names, "" for a
// static program.
func Interpreter(p string) (string, error) {
	f, err := elf.Open(p)
	if err != nil {
		return "", fmt.Errorf("reading the program %s: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, prog.Filesz)
		if _, err := prog.ReadAt(b, 0); err != nil {
			return "", fmt.Errorf("reading the interpreter of %s: %w", p, err)
		}
		return string(bytes.TrimRight(b, "\x00")), nil
	}
	return "", nil
}

// IsStatic reports whether the ELF file at p has no interpreter.
func IsStatic(p string) (bool, error) {
	interp, err := Interpreter(p)
	return interp == "", err
}

// parseLoaderTrace reads the loader's trace lines (ldd's format):
//
//	linux-vdso.so.1 (0x...)                        the kernel's; no file
//	libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x...)
//	/lib64/ld-linux-x86-64.so.2 (0x...)            the interpreter
//	libfoo.so.1 => not found                       an error
func parseLoaderTrace(out []byte) ([]string, error) {
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		name, resolved, arrow := strings.Cut(line, "=>")
		if !arrow {
			resolved = name
		}
		resolved = strings.TrimSpace(resolved)
		if strings.HasPrefix(resolved, "not found") {
			return nil, fmt.Errorf("shared library %s not found", strings.TrimSpace(name))
		}
		file, _, _ := strings.Cut(resolved, " (")
		if file = strings.TrimSpace(file); strings.HasPrefix(file, "/") {
			libs = append(libs, file)
		}
	}
	return libs, sc.Err()
}

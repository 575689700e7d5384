package imagebuild

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
// program at p: its interpreter and every library ldd resolves, as ldd
// names them (the same paths the loader opens). A static program has
// none, and ldd is not run for it.
func SharedLibraries(ctx context.Context, p string) ([]string, error) {
	static, err := isStatic(p)
	if err != nil {
		return nil, err
	}
	if static {
		return nil, nil
	}
	cmd := exec.CommandContext(ctx, "ldd", p)
	cmd.Env = []string{"LC_ALL=C", "PATH=/usr/bin:/bin"}
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("imagebuild: ldd %s: %w", p, err)
	}
	return parseLdd(out)
}

// isStatic reports whether the ELF file at p has no interpreter.
func isStatic(p string) (bool, error) {
	f, err := elf.Open(p)
	if err != nil {
		return false, fmt.Errorf("imagebuild: %s: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}

// parseLdd reads ldd's lines:
//
//	linux-vdso.so.1 (0x...)                        the kernel's; no file
//	libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x...)
//	/lib64/ld-linux-x86-64.so.2 (0x...)            the interpreter
//	libfoo.so.1 => not found                       an error
func parseLdd(out []byte) ([]string, error) {
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
			return nil, fmt.Errorf("imagebuild: ldd: %s not found", strings.TrimSpace(name))
		}
		file, _, _ := strings.Cut(resolved, " (")
		if file = strings.TrimSpace(file); strings.HasPrefix(file, "/") {
			libs = append(libs, file)
		}
	}
	return libs, sc.Err()
}

package cdi

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// mountInfoPath is the mount table of the calling thread's mount namespace;
// in a pod every thread shares one, and a test can give one thread its own.
const mountInfoPath = "/proc/thread-self/mountinfo"

// isMountPoint reports whether dir is the root of a mount: a line of the
// mount table has it as its mount point (the fifth field, relative to the
// process's root, so a chroot or a container sees its own paths). Comparing
// st_dev with the parent's does not tell: a bind mount of a directory of
// the same filesystem, which is how podman and the kubelet mount a hostPath
// or local volume, has its parent's st_dev.
func isMountPoint(dir string) (bool, error) {
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false, err
	}
	if resolved, err = filepath.Abs(resolved); err != nil {
		return false, err
	}
	f, err := os.Open(mountInfoPath)
	if err != nil {
		return false, err
	}
	defer f.Close()
	// Lines can be long (an overlay's lowerdir lists every layer): read
	// them whole rather than through a Scanner's bounded token.
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadString('\n')
		if fields := strings.Fields(line); len(fields) >= 5 && unescapeMountField(fields[4]) == resolved {
			return true, nil
		}
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("reading %s: %w", mountInfoPath, err)
		}
	}
}

// unescapeMountField undoes the kernel's octal escapes of the mount table
// (\040 for a space, \011 tab, \012 newline, \134 backslash).
func unescapeMountField(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

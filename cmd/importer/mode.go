package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/diskimport/engine/errdefs"
)

// defaultUmask is assumed when the process's umask cannot be read.
const defaultUmask = 0o022

// fileMode is the mode of a new file DEST: --mode (octal) when given, else
// what the umask allows of 0666, as any program creating a file gets.
func fileMode(flag string) (os.FileMode, error) {
	if flag == "" {
		return 0o666 &^ currentUmask(), nil
	}
	m, err := strconv.ParseUint(flag, 8, 32)
	if err != nil || m > 0o777 || m == 0 {
		return 0, fmt.Errorf("--mode %q: want permission bits in octal, such as 0644: %w", flag, errdefs.ErrInvalidOptions)
	}
	return os.FileMode(m), nil
}

// currentUmask reads the umask from /proc/self/status ("Umask:\t0022"),
// which, unlike umask(2), does not change it for the other threads while
// it is read.
func currentUmask() os.FileMode {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return defaultUmask
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Umask:"); ok {
			if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
				return os.FileMode(m)
			}
		}
	}
	return defaultUmask
}

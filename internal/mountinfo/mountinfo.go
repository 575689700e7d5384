// Package mountinfo reads the kernel's mount table of a mount namespace
// (/proc/PID/mountinfo, proc(5)): one reader of its fields and escapes for
// every package that asks where something is mounted.
package mountinfo

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Self is the mount table of the calling thread's mount namespace; in a
// pod every thread shares one, and a test can give one thread its own.
const Self = "/proc/thread-self/mountinfo"

// Mount is one line of the table, its paths unescaped.
type Mount struct {
	// Root is the directory of the mounted file system that is mounted
	// (not "/" for a bind mount of part of it, or a container's cgroup).
	Root string
	// Point is where it is mounted, relative to the process's root.
	Point string
	// FSType is the file system's type (ext4, cgroup, cgroup2...).
	FSType string
	// SuperOptions are the file system's own options (a cgroup v1
	// hierarchy's controllers among them).
	SuperOptions string
}

// HasOption tells whether the comma-separated super options hold option.
func (m Mount) HasOption(option string) bool {
	for _, o := range strings.Split(m.SuperOptions, ",") {
		if o == option {
			return true
		}
	}
	return false
}

// Read is the table in the file at path (Self, or a test's).
func Read(path string) ([]Mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ms, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return ms, nil
}

// Parse reads a table: "id parent major:minor root mount-point options
// [optional fields...] - fstype source super-options" a line. Lines can be
// long (an overlay's lowerdir lists every layer), so they are read whole;
// a line without its fields is skipped.
func Parse(r io.Reader) ([]Mount, error) {
	var ms []Mount
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if m, ok := parseLine(line); ok {
			ms = append(ms, m)
		}
		if errors.Is(err, io.EOF) {
			return ms, nil
		}
		if err != nil {
			return ms, err
		}
	}
}

func parseLine(line string) (Mount, bool) {
	fields := strings.Fields(line)
	sep := -1
	for i := 6; i < len(fields); i++ {
		if fields[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 || len(fields) < sep+4 {
		return Mount{}, false
	}
	return Mount{Root: Unescape(fields[3]), Point: Unescape(fields[4]), FSType: fields[sep+1], SuperOptions: fields[sep+3]}, true
}

// Unescape undoes the table's octal escapes of a path (\040 for a space,
// \011 tab, \012 newline, \134 backslash).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

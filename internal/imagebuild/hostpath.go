package imagebuild

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
)

// maxSymlinkHops bounds symlink resolution, as the kernel's limit does.
const maxSymlinkHops = 40

// AddHostFile copies the host's regular file at p into the tree at the
// same path. Every symlink met on the way, in a directory component (a
// merged /usr's /lib -> usr/lib) or at the end (a library's soname link),
// is added as the same symlink, so that the image resolves p exactly as
// the host does; the file itself lands at its resolved path. Its
// permissions are the host's, reduced to rwxr-xr-x or rw-r--r--.
// It returns the resolved path and the symlinks it went through.
func (t *Tree) AddHostFile(p string) (resolved string, symlinks []string, err error) {
	resolved, links, err := resolveHostPath(p)
	if err != nil {
		return "", nil, err
	}
	for _, l := range links {
		if err := t.Symlink(l.path, l.target); err != nil {
			return "", nil, err
		}
		symlinks = append(symlinks, l.path)
	}
	info, err := os.Stat(resolved)
	if err != nil {
		return "", nil, fmt.Errorf("imagebuild: %w", err)
	}
	if !info.Mode().IsRegular() {
		return "", nil, fmt.Errorf("imagebuild: %s (from %s) is not a regular file", resolved, p)
	}
	return resolved, symlinks, t.File(resolved, resolved, normalPerm(info.Mode()))
}

// normalPerm is 0755 for anything executable, else 0644.
func normalPerm(m fs.FileMode) fs.FileMode {
	if m&0o111 != 0 {
		return 0o755
	}
	return 0o644
}

type hostSymlink struct {
	path, target string
}

// resolveHostPath resolves p one component at a time, recording each
// symlink it goes through.
func resolveHostPath(p string) (string, []hostSymlink, error) {
	if !path.IsAbs(p) {
		return "", nil, fmt.Errorf("imagebuild: %q is not absolute", p)
	}
	var links []hostSymlink
	done, rest := "/", strings.Split(strings.TrimPrefix(path.Clean(p), "/"), "/")
	for hops := 0; len(rest) > 0; {
		next := path.Join(done, rest[0])
		rest = rest[1:]
		info, err := os.Lstat(next)
		if err != nil {
			return "", nil, fmt.Errorf("imagebuild: resolving %s: %w", p, err)
		}
		if info.Mode()&fs.ModeSymlink == 0 {
			done = next
			continue
		}
		if hops++; hops > maxSymlinkHops {
			return "", nil, fmt.Errorf("imagebuild: resolving %s: too many symlinks", p)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", nil, fmt.Errorf("imagebuild: %w", err)
		}
		links = append(links, hostSymlink{path: next, target: target})
		if !path.IsAbs(target) {
			target = path.Join(done, target)
		}
		done = "/"
		rest = append(strings.Split(strings.TrimPrefix(path.Clean(target), "/"), "/"), rest...)
	}
	return done, links, nil
}

package archive

import (
	"fmt"
	"strings"

	"github.com/diskimport/engine/errdefs"
)

// cleanName turns an archive member name into a slash-separated path
// relative to the extraction root, or refuses it. Only plain components are
// accepted: an absolute name or one with a ".." component could land
// outside the root, so it is refused instead of being "repaired" (a
// repaired name would silently put data somewhere the author did not
// mean). "." and empty components are dropped; the root itself is "".
func cleanName(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("archive member with an empty name: %w", errdefs.ErrUnsafeImage)
	}
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("archive member %q has an absolute path: %w", name, errdefs.ErrUnsafeImage)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", fmt.Errorf("archive member %q has a NUL byte in its name: %w", name, errdefs.ErrUnsafeImage)
	}
	parts := strings.Split(name, "/")
	out := parts[:0]
	for _, p := range parts {
		switch p {
		case "", ".":
			continue
		case "..":
			return "", fmt.Errorf("archive member %q climbs out of the destination with '..': %w", name, errdefs.ErrUnsafeImage)
		}
		out = append(out, p)
	}
	return strings.Join(out, "/"), nil
}

// splitParent splits a cleaned, non-empty relative path into its parent
// components and its last component.
func splitParent(rel string) (parents []string, base string) {
	parts := strings.Split(rel, "/")
	return parts[:len(parts)-1], parts[len(parts)-1]
}

// symlinkStaysInside reports whether a symlink at rel with the given target
// resolves, lexically, to somewhere inside the root. The check is lexical
// on purpose: the link is never followed while extracting (every path walk
// refuses symlink components), so this only decides which links may exist
// in the tree for whoever uses it later.
func symlinkStaysInside(rel, target string) bool {
	if target == "" || strings.HasPrefix(target, "/") {
		return false
	}
	parents, _ := splitParent(rel)
	depth := len(parents)
	for _, p := range strings.Split(target, "/") {
		switch p {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return false
			}
		default:
			depth++
		}
	}
	return true
}

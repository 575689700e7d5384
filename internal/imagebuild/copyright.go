package imagebuild

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
)

// addCopyrights adds /usr/share/doc/PKG/copyright for the Debian package
// of every host path that dpkg knows. A path may be known under any of its
// names (dpkg records /lib/... on a merged-/usr machine), so every name is
// asked; files that belong to no package are left alone.
func addCopyrights(ctx context.Context, t *Tree, hostPaths []string) error {
	pkgs, err := debianPackages(ctx, hostPaths)
	if err != nil {
		return err
	}
	for _, pkg := range pkgs {
		doc := path.Join("/usr/share/doc", pkg, "copyright")
		if _, err := os.Stat(doc); err != nil {
			continue // a package without one (or docs excluded by dpkg's path filters)
		}
		if _, _, err := t.AddHostFile(doc); err != nil {
			return err
		}
	}
	return nil
}

// debianPackages names the packages (without architecture) that own any
// of paths, sorted. It is empty where dpkg-query is not installed.
func debianPackages(ctx context.Context, paths []string) ([]string, error) {
	bin, err := exec.LookPath("dpkg-query")
	if err != nil {
		return nil, nil
	}
	var pkgs []string
	for _, p := range slices.Compact(slices.Sorted(slices.Values(paths))) {
		cmd := exec.CommandContext(ctx, bin, "-S", p)
		cmd.Env = []string{"LC_ALL=C"}
		out, err := cmd.Output()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			continue // no package has this name
		}
		if err != nil {
			return nil, fmt.Errorf("imagebuild: dpkg-query -S %s: %w", p, err)
		}
		pkgs = append(pkgs, parseDpkgSearch(string(out))...)
	}
	return slices.Compact(slices.Sorted(slices.Values(pkgs))), nil
}

// parseDpkgSearch reads `dpkg-query -S` lines, "pkg1:amd64, pkg2: /path".
func parseDpkgSearch(out string) []string {
	var pkgs []string
	for _, line := range strings.Split(out, "\n") {
		owners, _, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		for _, owner := range strings.Split(owners, ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(owner), ":")
			if name != "" && !strings.Contains(name, " ") {
				pkgs = append(pkgs, name)
			}
		}
	}
	return pkgs
}

package cdi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/diskimport/engine/errdefs"
)

// headerFiles reads the extra HTTP headers the controller mounts from
// secrets under dir (/extraheaders/<n>/<key>): every file is one
// "Name: value" line. As in CDI, hidden entries are skipped, among them
// the "..data" and "..<timestamp>" directories a Kubernetes secret volume
// keeps its real files in (the visible names are symlinks into them, which
// os.Stat follows), and a missing dir means no headers. Errors name the
// file, never its content, which is often a token.
func headerFiles(dir string) ([]string, error) {
	var headers []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipDir
			}
			return err
		}
		if path == dir {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil // a subdirectory WalkDir enters by itself, or a link to one
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// A secret's value often ends in the newline of the file it was
		// made from; a header cannot hold one.
		headers = append(headers, strings.TrimRight(string(b), "\r\n"))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading extra headers under %s: %w: %w", dir, err, errdefs.ErrInvalidOptions)
	}
	return headers, nil
}

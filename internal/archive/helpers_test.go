package archive_test

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// node is what snapshot records of one path.
type node struct {
	Mode  fs.FileMode
	MTime time.Time
	Data  string // sha256 of a file, or a symlink's target
}

// snapshot records every path under root (relative), skipping skip.
func snapshot(t testing.TB, root, skip string) map[string]node {
	t.Helper()
	out := map[string]node{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if skip != "" && p == skip {
			return filepath.SkipDir
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		n := node{Mode: st.Mode(), MTime: st.ModTime()}
		switch {
		case st.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			n.Data = hex.EncodeToString(sum[:])
		case st.Mode()&fs.ModeSymlink != 0:
			n.Data, err = os.Readlink(p)
			if err != nil {
				return err
			}
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = n
		return nil
	})
	require.NoError(t, err)
	return out
}

// sandbox makes base/{sentinel,dest}: dest is where archives go, sentinel
// a directory outside it that must never change.
func sandbox(t testing.TB) (base, dest string) {
	t.Helper()
	base = t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(base, "sentinel", "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(base, "sentinel", "keep"), []byte("do not touch\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(base, "sentinel", "sub", "passwd"), []byte("root:x:0:0\n"), 0o644))
	dest = filepath.Join(base, "dest")
	require.NoError(t, os.Mkdir(dest, 0o755))
	return base, dest
}

func sortedKeys(m map[string]node) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

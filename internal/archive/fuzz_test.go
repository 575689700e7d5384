package archive_test

import (
	"archive/tar"
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/archive"
)

// FuzzExtractPaths extracts two-member archives with arbitrary names, link
// targets and types and checks that nothing outside the destination ever
// changes, whatever Extract decides.
func FuzzExtractPaths(f *testing.F) {
	seeds := []struct {
		n1, l1 string
		t1     byte
		n2     string
		t2     byte
	}{
		{"a", "", tar.TypeReg, "b", tar.TypeReg},
		{"../x", "", tar.TypeReg, "y", tar.TypeDir},
		{"s", "/", tar.TypeSymlink, "s/tmp/x", tar.TypeReg},
		{"s", "..", tar.TypeSymlink, "s/sentinel/keep", tar.TypeReg},
		{"s", "../sentinel", tar.TypeSymlink, "s", tar.TypeLink},
		{"h", "../sentinel/keep", tar.TypeLink, "h", tar.TypeReg},
		{"d/", "", tar.TypeDir, "d/../../x", tar.TypeReg},
		{"./a/./b", "", tar.TypeReg, "a//c", tar.TypeSymlink},
		{"/abs", "", tar.TypeReg, "x", tar.TypeChar},
	}
	for _, s := range seeds {
		f.Add(s.n1, s.l1, s.t1, s.n2, s.t2, true)
	}
	f.Fuzz(func(t *testing.T, n1, l1 string, t1 byte, n2 string, t2 byte, allow bool) {
		types := []byte{tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink, tar.TypeFifo}
		t1, t2 = types[int(t1)%len(types)], types[int(t2)%len(types)]
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range []*tar.Header{
			{Name: n1, Typeflag: t1, Linkname: l1, Mode: 0o644, Format: tar.FormatPAX},
			{Name: n2, Typeflag: t2, Linkname: l1, Mode: 0o644, Size: 3, Format: tar.FormatPAX},
		} {
			if h.Typeflag != tar.TypeReg {
				h.Size = 0
			}
			if tw.WriteHeader(h) != nil {
				return // not representable in a tar
			}
			if h.Size > 0 {
				_, _ = tw.Write([]byte("bad"))
			}
		}
		if tw.Close() != nil {
			return
		}
		base, dest := sandbox(t)
		before := snapshot(t, base, dest)
		_, _ = archive.Extract(context.Background(), &buf, dest, archive.Options{AllowOutsideSymlinks: allow, SkipOwnership: true})
		require.Equal(t, before, snapshot(t, base, dest), "names %q %q link %q", n1, n2, l1)
	})
}

package format

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testimg"
)

const htmlPage = "<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>\n<body><h1>Not Found</h1><p>The requested URL was not found on this server.</p></body></html>\n"

func TestTextRefused(t *testing.T) {
	utf8Page := strings.Repeat("Überschrift — ein Absatz mit Umlauten äöü, 日本語のテキスト。\n", 40)
	cases := []struct {
		name, body string
		o          Options
		message    string
	}{
		{"html from a server", htmlPage, Options{FromServer: true},
			`the server returned a text page, not a disk image; it begins "<!DOCTYPE html>"`},
		{"html with its content type", htmlPage, Options{FromServer: true, ContentType: "text/html; charset=utf-8"},
			"the server returned a text page (Content-Type text/html; charset=utf-8), not a disk image"},
		{"a text file", "just some notes\r\n\tindented\n", Options{}, `the source is text, not a disk image; it begins "just some notes"`},
		// Multi-byte characters, one of them cut at the KiB's end.
		{"utf-8 text", utf8Page, Options{}, "the source is text"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Open(context.Background(), strings.NewReader(c.body), c.o)
			require.ErrorIs(t, err, errdefs.ErrTextNotImage)
			require.ErrorIs(t, err, errdefs.ErrUnsupportedFormat)
			assert.Contains(t, err.Error(), c.message)
			assert.Contains(t, err.Error(), "--format-in raw")

			s, err := Open(context.Background(), strings.NewReader(c.body), Options{ForceRaw: true})
			require.NoError(t, err)
			got, err := io.ReadAll(s)
			require.NoError(t, err)
			assert.Equal(t, c.body, string(got))
			require.NoError(t, s.Close())
		})
	}
	// A compressed text is text once decompressed.
	_, _, err := openBytes(t, gzipBytes(t, []byte(htmlPage)))
	require.ErrorIs(t, err, errdefs.ErrTextNotImage)
	assert.Contains(t, err.Error(), "(once gzip is removed)")
}

// A text Content-Type refuses a body without a NUL byte in its first KiB
// (a Latin-1 page, a page with stray control characters); a disk served
// as text (a .vhd as text/x-vhdl) or a compression served as text/plain
// is still a disk.
func TestTextContentType(t *testing.T) {
	latin1 := []byte("<html><body>Caf\xe9 ferm\xe9\x01 \x7f</body></html>")
	require.False(t, looksLikeText(latin1))
	_, err := Open(context.Background(), bytes.NewReader(latin1), Options{FromServer: true, ContentType: "text/html; charset=iso-8859-1"})
	require.ErrorIs(t, err, errdefs.ErrTextNotImage)
	binary := variedContent(64<<10, 9)
	binary[100] = 0
	s, err := Open(context.Background(), bytes.NewReader(binary), Options{FromServer: true, ContentType: "text/x-vhdl"})
	require.NoError(t, err)
	s.Close()
	s, err = Open(context.Background(), bytes.NewReader(gzipBytes(t, binary)), Options{FromServer: true, ContentType: "text/plain"})
	require.NoError(t, err)
	assert.Equal(t, []Compression{Gzip}, s.Compressions)
	s.Close()
	qcow := readFile(t, convert(t, writeTemp(t, binary), t.TempDir(), "d.qcow2", "qcow2"))
	s, err = Open(context.Background(), bytes.NewReader(qcow), Options{FromServer: true, ContentType: "text/html"})
	require.NoError(t, err)
	assert.Equal(t, QCOW2, s.Format)
	s.Close()
}

// No real disk image is taken for text: every image of the shared corpus
// (ISOs, raw disks, boot sectors, every container format) is opened, and
// none is refused as text; the raw and ISO ones are not text by the probe.
func TestRealImagesAreNotText(t *testing.T) {
	root := testimg.RealImages()
	files, _ := filepath.Glob(filepath.Join(root, "*", "*.xz"))
	if len(files) == 0 {
		t.Skip("shared real images not available")
	}
	rawOrISO := 0
	for _, f := range files {
		b, err := exec.Command("xz", "-dc", f).Output()
		require.NoError(t, err, f)
		s, err := Open(context.Background(), bytes.NewReader(b), Options{FromServer: true})
		require.False(t, errors.Is(err, errdefs.ErrTextNotImage), "%s refused as text: %v", f, err)
		if err != nil {
			continue
		}
		if s.Format == Raw || s.Format == ISO {
			rawOrISO++
			assert.False(t, looksLikeText(b), f)
		}
		s.Close()
	}
	assert.GreaterOrEqual(t, rawOrISO, 6, "raw and iso images seen")
}

func writeTemp(t *testing.T, b []byte) string {
	p := filepath.Join(t.TempDir(), "disk.raw")
	require.NoError(t, os.WriteFile(p, b, 0o644))
	return p
}

func readFile(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return b
}

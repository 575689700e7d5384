package main

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// extent is one written region of the test disk.
type extent struct {
	Kind   string `json:"kind"` // random, binary, text, zeros
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
}

// layout places the regions of perf-limits.md §2 (a 2 GiB disk, 35% data)
// proportionally on a disk of any size; the first and last MiB are random
// like a boot loader and a backup GPT. Offsets stay MiB-aligned.
func layout(size int64) []extent {
	const mib = 1 << 20
	// part(n) is n/2048 of the disk: n MiB on the 2 GiB reference disk.
	part := func(n int64) int64 { return size / 2048 * n / mib * mib }
	return []extent{
		{"random", 0, mib},
		{"binary", part(256), part(300)},
		{"zeros", part(556), part(64)},
		{"random", part(800), part(180)},
		{"text", part(1250), part(150)},
		{"binary", part(1600), part(86)},
		{"random", size - mib, mib},
	}
}

// parseSize reads 2G, 512M, 2GiB or a byte count (binary units).
func parseSize(s string) (int64, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(s), "IB"), "B")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			mult, t = 1<<10, t[:n-1]
		case 'M':
			mult, t = 1<<20, t[:n-1]
		case 'G':
			mult, t = 1<<30, t[:n-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("size %q: want e.g. 2G or 512M", s)
	}
	return v * mult, nil
}

// corpus streams the concatenation of real files under roots (sorted, so a
// machine image gives the same bytes each time), cycling when exhausted.
type corpus struct {
	files []string
	i     int
	cur   *os.File
}

func newCorpus(roots []string, keep func(string) bool) *corpus {
	c := &corpus{}
	for _, root := range roots {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() && keep(p) {
				c.files = append(c.files, p)
			}
			return nil
		})
	}
	sort.Strings(c.files)
	return c
}

func (c *corpus) Read(p []byte) (int, error) {
	if len(c.files) == 0 {
		return 0, fmt.Errorf("corpus: no files found")
	}
	for tries := 0; tries < 2*len(c.files)+2; tries++ {
		if c.cur == nil {
			f, err := os.Open(c.files[c.i%len(c.files)])
			c.i++
			if err != nil {
				continue
			}
			c.cur = f
		}
		n, err := c.cur.Read(p)
		if n > 0 {
			return n, nil
		}
		c.cur.Close()
		c.cur = nil
		if err != nil && err != io.EOF {
			continue
		}
	}
	return 0, fmt.Errorf("corpus: nothing readable")
}

type rngReader struct{ r *rand.ChaCha8 }

func (g rngReader) Read(p []byte) (int, error) { return g.r.Read(p) }

func runGen(args []string) error {
	if len(args) != 2 {
		usage()
	}
	size, err := parseSize(args[0])
	if err != nil {
		return err
	}
	if size < 64<<20 {
		return fmt.Errorf("size %d: at least 64M", size)
	}
	out := args[1]
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return err
	}
	var seed [32]byte
	copy(seed[:], "diskimport bench test disk v1...")
	rnd := rngReader{rand.NewChaCha8(seed)}
	bin := newCorpus([]string{"/usr/lib/x86_64-linux-gnu", "/usr/lib", "/usr/bin"}, func(p string) bool {
		return strings.Contains(filepath.Base(p), ".so") || strings.HasPrefix(p, "/usr/bin/")
	})
	text := newCorpus([]string{"/usr/local/go/src", "/usr/share/doc", "/usr/include"}, func(p string) bool {
		switch filepath.Ext(p) {
		case ".go", ".h", ".c", ".s", ".txt", ".html", ".md", ".py":
			return true
		}
		return false
	})
	var data, nonzero int64
	lay := layout(size)
	for _, e := range lay {
		var src io.Reader
		switch e.Kind {
		case "random":
			src = rnd
		case "binary":
			src = bin
		case "text":
			src = text
		default:
			src = zeroReader{}
		}
		w := io.NewOffsetWriter(f, e.Offset)
		if _, err := io.CopyN(w, src, e.Length); err != nil {
			return fmt.Errorf("%s at %d: %w", e.Kind, e.Offset, err)
		}
		data += e.Length
		if e.Kind != "zeros" {
			nonzero += e.Length
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"virtual_size": size, "allocated_bytes": data, "data_bytes": nonzero, "extents": lay,
	})
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

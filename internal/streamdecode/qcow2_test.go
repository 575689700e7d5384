package streamdecode

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/diskimport/engine/errdefs"
)

type qcow2Case struct {
	name string
	opts string   // qemu-img convert -o
	c    bool     // compressed clusters (-c)
	io   []string // qemu-io commands run on the converted image
	post [][]string
}

var qcow2Cases = []qcow2Case{
	{name: "v2-64k", opts: "compat=0.10"},
	{name: "v3-512", opts: "cluster_size=512"},
	{name: "v3-4k", opts: "cluster_size=4096"},
	{name: "v3-64k"},
	{name: "v3-2m", opts: "cluster_size=2M"},
	{name: "v2-zlib", opts: "compat=0.10", c: true},
	{name: "zlib-4k", opts: "cluster_size=4096", c: true},
	{name: "zlib-64k", c: true},
	{name: "zlib-2m", opts: "cluster_size=2M", c: true},
	{name: "zstd-64k", opts: "compression_type=zstd", c: true},
	{name: "zstd-16k", opts: "compression_type=zstd,cluster_size=16384", c: true},
	{name: "extl2-64k", opts: "extended_l2=on"},
	{name: "extl2-1m", opts: "extended_l2=on,cluster_size=1M"},
	{name: "extl2-zlib", opts: "extended_l2=on", c: true},
	{name: "extl2-partial", opts: "extended_l2=on,cluster_size=128k",
		io: []string{"write -P 0x5a 4k 4k", "write -P 0x6b 1M 12k", "write -z 8M 16k", "write -P 0x11 20M 100k"}},
	{name: "refcount-1", opts: "refcount_bits=1"},
	{name: "refcount-64", opts: "refcount_bits=64"},
	{name: "prealloc-metadata", opts: "preallocation=metadata"},
	{name: "zero-clusters", io: []string{"write -z 0 1M", "write -z 5M 3M", "write -P 0x33 6M 64k"}},
	{name: "snapshot", post: [][]string{{"qemu-img", "snapshot", "-c", "s1", "IMG"}},
		io: []string{"write -P 0x77 2M 256k", "write -P 0x78 14M 64k"}},
	{name: "bitmap", post: [][]string{{"qemu-img", "bitmap", "--add", "IMG", "b0"}}},
}

func makeQCOW2(t testing.TB, dir string, raw string, c qcow2Case) string {
	t.Helper()
	img := filepath.Join(dir, c.name+".qcow2")
	args := []string{"convert", "-q", "-f", "raw", "-O", "qcow2"}
	if c.c {
		args = append(args, "-c")
	}
	if c.opts != "" {
		args = append(args, "-o", c.opts)
	}
	run(t, "qemu-img", append(args, raw, img)...)
	for _, p := range c.post {
		args := slices.Clone(p[1:])
		for i := range args {
			if args[i] == "IMG" {
				args[i] = img
			}
		}
		run(t, p[0], args...)
	}
	for _, cmd := range c.io {
		run(t, "qemu-io", "-f", "qcow2", "-c", cmd, img)
	}
	return img
}

func TestQCOW2MatchesQemuImg(t *testing.T) {
	need(t, "qemu-img", "qemu-io")
	dir := t.TempDir()
	const size = 24<<20 + 3*512 // not a multiple of any cluster size
	raw := rawDisk(t, filepath.Join(dir, "disk.raw"), size, 40, 1)
	for _, c := range qcow2Cases {
		t.Run(c.name, func(t *testing.T) {
			img := makeQCOW2(t, t.TempDir(), raw, c)
			want := reference(t, img, "qcow2")
			for _, zs := range []bool{false, true} {
				got, st, err := decodeFile(t, DecodeQCOW2, img, int64(len(want)), zs, Options{})
				if err != nil {
					t.Fatalf("zeroSink=%v: %v", zs, err)
				}
				sameBytes(t, got, want)
				if zs {
					t.Logf("stream %d bytes, data %d, compressed %d, buffered peak %d total %d", st.StreamBytes, st.DataBytes, st.Compressed, st.PeakBuffered, st.BufferedBytes)
				}
			}
		})
	}
}

// TestQCOW2Truncated cuts an image at many points: every cut must fail
// with ErrInvalidImage (or ErrNotStreamable, never success), unless what is
// cut off is only unused trailing bytes.
func TestQCOW2Truncated(t *testing.T) {
	need(t, "qemu-img")
	dir := t.TempDir()
	raw := rawDisk(t, filepath.Join(dir, "disk.raw"), 8<<20, 40, 2)
	for _, c := range []qcow2Case{{name: "plain"}, {name: "zlib", c: true}, {name: "zstd", opts: "compression_type=zstd", c: true}} {
		t.Run(c.name, func(t *testing.T) {
			img := makeQCOW2(t, t.TempDir(), raw, c)
			full, err := os.ReadFile(img)
			if err != nil {
				t.Fatal(err)
			}
			want := reference(t, img, "qcow2")
			for _, cut := range []int{0, 100, 512, 70000, len(full) / 3, len(full) / 2, len(full) - 70000, len(full) - 4096, len(full) - 1} {
				if cut < 0 || cut >= len(full) {
					continue
				}
				p := filepath.Join(t.TempDir(), "cut.qcow2")
				if err := os.WriteFile(p, full[:cut], 0o644); err != nil {
					t.Fatal(err)
				}
				got, _, err := decodeFile(t, DecodeQCOW2, p, int64(len(want)), false, Options{})
				if err == nil {
					if string(got) != string(want) {
						t.Errorf("cut at %d of %d: no error, and the disk differs", cut, len(full))
					}
					continue
				}
				if !errors.Is(err, errdefs.ErrInvalidImage) {
					t.Errorf("cut at %d of %d: %v, want ErrInvalidImage", cut, len(full), err)
				}
			}
		})
	}
}

// TestQCOW2Refused: what the header checks refuse is refused here too.
func TestQCOW2Refused(t *testing.T) {
	need(t, "qemu-img")
	dir := t.TempDir()
	base := filepath.Join(dir, "base.qcow2")
	run(t, "qemu-img", "create", "-q", "-f", "qcow2", base, "4M")
	over := filepath.Join(dir, "over.qcow2")
	run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-b", base, "-F", "qcow2", over)
	df := filepath.Join(dir, "df.qcow2")
	run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-o", "data_file="+filepath.Join(dir, "df.raw"), df, "4M")
	for name, p := range map[string]string{"backing": over, "data-file": df} {
		_, _, err := decodeFile(t, DecodeQCOW2, p, 4<<20, false, Options{})
		if !errors.Is(err, errdefs.ErrUnsafeImage) {
			t.Errorf("%s: %v, want ErrUnsafeImage", name, err)
		}
	}
}

// TestQCOW2BufferBound: an image whose tables come after its data needs
// the buffer; a buffer too small gives ErrNotStreamable.
func TestQCOW2BufferBound(t *testing.T) {
	need(t, "qemu-img", "qemu-io")
	dir := t.TempDir()
	raw := rawDisk(t, filepath.Join(dir, "disk.raw"), 16<<20, 60, 3)
	// After a snapshot, rewriting data allocates new L2 tables at the end
	// of the file, after the data clusters they map.
	img := makeQCOW2(t, dir, raw, qcow2Case{name: "late", post: [][]string{{"qemu-img", "snapshot", "-c", "s1", "IMG"}},
		io: []string{"write -P 0x42 1M 64k"}})
	want := reference(t, img, "qcow2")
	got, st, err := decodeFile(t, DecodeQCOW2, img, int64(len(want)), false, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sameBytes(t, got, want)
	t.Logf("buffered peak %d bytes", st.PeakBuffered)
	if st.PeakBuffered == 0 {
		t.Skip("layout needed no buffer; nothing to bound")
	}
	_, _, err = decodeFile(t, DecodeQCOW2, img, int64(len(want)), false, Options{MaxBuffered: st.PeakBuffered - 1})
	if !errors.Is(err, errdefs.ErrNotStreamable) {
		t.Fatalf("buffer of %d: %v, want ErrNotStreamable", st.PeakBuffered-1, err)
	}
	if !strings.Contains(err.Error(), "buffer") {
		t.Errorf("error does not say why: %v", err)
	}
}

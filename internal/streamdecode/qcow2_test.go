package streamdecode

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/testimg"
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
	testimg.Run(t, "qemu-img", append(args, raw, img)...)
	for _, p := range c.post {
		args := slices.Clone(p[1:])
		for i := range args {
			if args[i] == "IMG" {
				args[i] = img
			}
		}
		testimg.Run(t, p[0], args...)
	}
	for _, cmd := range c.io {
		testimg.Run(t, "qemu-io", "-f", "qcow2", "-c", cmd, img)
	}
	return img
}

func TestQCOW2MatchesQemuImg(t *testing.T) {
	testimg.Need(t, "qemu-img", "qemu-io")
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
	testimg.Need(t, "qemu-img")
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
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	base := filepath.Join(dir, "base.qcow2")
	testimg.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", base, "4M")
	over := filepath.Join(dir, "over.qcow2")
	testimg.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-b", base, "-F", "qcow2", over)
	df := filepath.Join(dir, "df.qcow2")
	testimg.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-o", "data_file="+filepath.Join(dir, "df.raw"), df, "4M")
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
	testimg.Need(t, "qemu-img", "qemu-io")
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

// snapImage is a qcow2 with two internal snapshots, written to before,
// between and after them, so the active layer's clusters arrive both
// before and after their L2 tables.
func snapImage(t *testing.T, dir string, opts string) string {
	t.Helper()
	testimg.Need(t, "qemu-img", "qemu-io")
	raw := rawDisk(t, filepath.Join(dir, "disk.raw"), 12<<20, 50, 31)
	img := makeQCOW2(t, dir, raw, qcow2Case{name: "snaps", opts: opts, io: []string{"write -P 0x21 256k 64k"}})
	testimg.Run(t, "qemu-img", "snapshot", "-c", "s1", img)
	testimg.Run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0x22 1M 192k", "-c", "write -z 3M 64k", img)
	testimg.Run(t, "qemu-img", "snapshot", "-c", "second snapshot", img)
	testimg.Run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0x23 8M 128k", "-c", "write -P 0x24 300k 8k", img)
	return img
}

// TestQCOW2Snapshots: the active layer of images with snapshots matches
// qemu-img convert, in memory and through a spill file.
func TestQCOW2Snapshots(t *testing.T) {
	for _, opts := range []string{"", "compat=0.10", "cluster_size=4096", "extended_l2=on"} {
		t.Run("opts="+opts, func(t *testing.T) {
			img := snapImage(t, t.TempDir(), opts)
			want := reference(t, img, "qcow2")
			for _, o := range []Options{{}, {MaxBuffered: 256 << 10, SpillDir: t.TempDir()}} {
				got, st, err := decodeFile(t, DecodeQCOW2, img, int64(len(want)), true, o)
				if err != nil {
					t.Fatalf("%+v: %v", o, err)
				}
				sameBytes(t, got, want)
				t.Logf("buffered peak %d, spilled %d", st.PeakBuffered, st.SpilledBytes)
				if o.SpillDir != "" {
					emptyDir(t, o.SpillDir)
				}
			}
		})
	}
}

// qemuCheckRefuses reports whether qemu-img check (what the scratch route
// runs) fails the image: exit 1 (cannot check, or qemu cannot open it) or
// 2 (corruptions); 3 is leaks only.
func qemuCheckRefuses(t *testing.T, img string) (bool, string) {
	t.Helper()
	out, err := exec.Command("qemu-img", "check", "-f", "qcow2", img).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode() == 1 || ee.ExitCode() == 2, string(out)
	}
	if err != nil {
		t.Fatal(err)
	}
	return false, string(out)
}

// TestQCOW2SnapshotTableRefused: damage to the snapshot table that
// qemu-img check refuses is refused by the decoder too.
func TestQCOW2SnapshotTableRefused(t *testing.T) {
	img := snapImage(t, t.TempDir(), "")
	orig, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	be := binary.BigEndian
	tab := be.Uint64(orig[64:]) // snapshots_offset
	size := uint64(len(orig))
	cases := []struct {
		name  string
		patch func(b []byte) []byte
	}{
		{"extra-data-too-big", func(b []byte) []byte { be.PutUint32(b[tab+36:], 2000); return b }},
		{"extra-data-short-v3", func(b []byte) []byte { be.PutUint32(b[tab+36:], 8); return b }},
		{"l1-unaligned", func(b []byte) []byte { be.PutUint64(b[tab:], be.Uint64(b[tab:])+512); return b }},
		{"l1-too-large", func(b []byte) []byte { be.PutUint32(b[tab+8:], 5<<20); return b }},
		{"l1-past-end", func(b []byte) []byte { be.PutUint64(b[tab:], (size+1<<20)&^0xffff); return b }},
		{"table-past-end", func(b []byte) []byte { be.PutUint64(b[64:], (size+1<<20)&^0xffff); return b }},
		{"table-cut", func(b []byte) []byte { return b[:tab+20] }},
		{"l2-past-end", func(b []byte) []byte {
			l1 := be.Uint64(b[tab:])
			be.PutUint64(b[l1:], (size+4<<20)&^0xffff)
			return b
		}},
		{"l2-unaligned", func(b []byte) []byte {
			l1 := be.Uint64(b[tab:])
			be.PutUint64(b[l1:], be.Uint64(b[l1:])+4096)
			return b
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "bad.qcow2")
			if err := os.WriteFile(p, c.patch(append([]byte(nil), orig...)), 0o644); err != nil {
				t.Fatal(err)
			}
			refused, out := qemuCheckRefuses(t, p)
			t.Logf("qemu-img check refuses: %v\n%s", refused, out)
			_, _, err := decodeFile(t, DecodeQCOW2, p, 12<<20, false, Options{})
			t.Logf("decoder: %v", err)
			if refused && !errors.Is(err, errdefs.ErrInvalidImage) {
				t.Errorf("qemu-img check refuses it; decoder: %v, want ErrInvalidImage", err)
			}
			if !refused && err != nil {
				t.Errorf("qemu-img check accepts it; decoder: %v", err)
			}
		})
	}
}

// While the writes lag, the decoder reads on through the stream chunks it
// has, so a decompressor in front of it is not stopped: with a queue of 4 ×
// workers 64 KiB clusters it stopped within the first chunk.
func TestQCOW2ReadsOnWhileTheWritesLag(t *testing.T) {
	img, want := plainQCOW2(t, "dense", 48<<20, 100, 5)
	read := readWhileTheFirstWriteWaits(t, DecodeQCOW2, img, want)
	assert.GreaterOrEqual(t, read, int64(chunkCount-1)*chunkBytes,
		"read %d bytes while the first write waited, want the chunks' %d", read, chunkCount*chunkBytes)
}

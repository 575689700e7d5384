package streamdecode

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/diskimport/engine/errdefs"
)

// snapImage is a qcow2 with two internal snapshots, written to before,
// between and after them, so the active layer's clusters arrive both
// before and after their L2 tables.
func snapImage(t *testing.T, dir string, opts string) string {
	t.Helper()
	need(t, "qemu-img", "qemu-io")
	raw := rawDisk(t, filepath.Join(dir, "disk.raw"), 12<<20, 50, 31)
	img := makeQCOW2(t, dir, raw, qcow2Case{name: "snaps", opts: opts, io: []string{"write -P 0x21 256k 64k"}})
	run(t, "qemu-img", "snapshot", "-c", "s1", img)
	run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0x22 1M 192k", "-c", "write -z 3M 64k", img)
	run(t, "qemu-img", "snapshot", "-c", "second snapshot", img)
	run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0x23 8M 128k", "-c", "write -P 0x24 300k 8k", img)
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

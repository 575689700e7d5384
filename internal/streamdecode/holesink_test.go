package streamdecode

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/diskimport/engine/format"
)

// memHoleSink is a plain Sink prefilled with garbage: Hole clears what
// the decoder reports, so the disk comes out right only if every byte is
// either written or reported.
type memHoleSink struct {
	*memSink
	zeroWrites int // all-zero writes a plain sink should not get
}

func (m *memHoleSink) Hole(off, n int64) {
	if off < 0 || off+n > int64(len(m.b)) {
		m.t.Errorf("hole of %d bytes at %d outside the %d-byte disk", n, off, len(m.b))
		return
	}
	clear(m.b[off : off+n])
}

func (m *memHoleSink) WriteAt(p []byte, off int64) (int, error) {
	if len(p) >= 4096 && bytes.Equal(p, make([]byte, len(p))) {
		m.zeroWrites++
	}
	return m.memSink.WriteAt(p, off)
}

func TestHoleSinkHearsOfEveryByteNotWritten(t *testing.T) {
	need(t, "qemu-img")
	dir := t.TempDir()
	const size = 9<<20 + 512
	raw := rawDisk(t, filepath.Join(dir, "disk.raw"), size, 40, 3)
	for _, c := range []struct {
		name, qfmt string
		f          format.Format
		opts       []string
	}{
		{"qcow2", "qcow2", format.QCOW2, nil},
		{"qcow2-4k", "qcow2", format.QCOW2, []string{"cluster_size=4096"}},
		{"vhd", "vpc", format.VHD, []string{"subformat=dynamic", "force_size=on"}},
		{"vdi", "vdi", format.VDI, nil},
		{"vmdk-stream", "vmdk", format.VMDK, []string{"subformat=streamOptimized"}},
		{"vhdx", "vhdx", format.VHDX, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			img := filepath.Join(dir, c.name)
			args := []string{"convert", "-q", "-f", "raw", "-O", c.qfmt}
			for _, o := range c.opts {
				args = append(args, "-o", o)
			}
			run(t, "qemu-img", append(args, raw, img)...)
			want := reference(t, img, c.qfmt)
			f, err := os.Open(img)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			m := &memHoleSink{memSink: &memSink{t: t, b: bytes.Repeat([]byte{0xa5}, len(want))}}
			if _, err := Decode(context.Background(), f, c.f, m, Options{}); err != nil {
				t.Fatal(err)
			}
			sameBytes(t, m.b, want)
			if m.zeroWrites > 0 {
				t.Errorf("%d all-zero writes reached a plain sink", m.zeroWrites)
			}
		})
	}
}

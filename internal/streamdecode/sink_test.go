package streamdecode

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// The hashed sink keeps its sink's kind and digests the disk the sink
// ends up holding: data written over a zeroed disk (a vmdk zeroes it
// before its grains), and holes a plain sink is told of and never written.
func TestWithContentHashDigestsTheSinksDisk(t *testing.T) {
	const size = 2 << 20
	data := bytes.Repeat([]byte("guest data 0123456789abcdef"), size/27+1)[:size]
	want := func(disk []byte) blkhash.Digest {
		h := blkhash.New(0)
		_, _ = h.Write(disk)
		return h.Sum()
	}

	zs := memZeroSink{&memSink{t: t, b: make([]byte, size)}}
	sink, hs := WithContentHash(zs)
	z, ok := sink.(ZeroSink)
	require.True(t, ok, "a ZeroSink stays one")
	require.NoError(t, z.ZeroAt(0, size))
	_, err := sink.WriteAt(data[64<<10:1<<20], 64<<10)
	require.NoError(t, err)
	got, err := hs.Sum(size)
	require.NoError(t, err)
	assert.Equal(t, want(zs.b), got)

	plain := &memSink{t: t, b: make([]byte, size)}
	sink, hs = WithContentHash(plain)
	_, isZero := sink.(ZeroSink)
	assert.False(t, isZero, "a plain sink stays one")
	holes, ok := sink.(HoleSink)
	require.True(t, ok)
	_, err = sink.WriteAt(data[:1<<20], 0)
	require.NoError(t, err)
	holes.Hole(1<<20, 1<<20)
	got, err = hs.Sum(size)
	require.NoError(t, err)
	assert.Equal(t, want(plain.b), got)
}

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
	testimg.Need(t, "qemu-img")
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
			testimg.Run(t, "qemu-img", append(args, raw, img)...)
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

var errSinkBroke = errors.New("sink broke")

// failingSink fails from its n-th write on; cancel, if set, is called at
// the first write instead.
type failingSink struct {
	n      atomic.Int64
	cancel context.CancelFunc
}

func (s *failingSink) WriteAt(p []byte, off int64) (int, error) {
	if s.cancel != nil {
		s.cancel()
		return len(p), nil
	}
	if s.n.Add(-1) < 0 {
		return 0, errSinkBroke
	}
	return len(p), nil
}

// TestSinkFailureAndCancel: a failing target or a cancelled context stops
// every decoder (reader, workers, output) with that cause, without hanging.
func TestSinkFailureAndCancel(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := rawDisk(t, filepath.Join(dir, "disk.raw"), 32<<20, 50, 12)
	for _, c := range []struct {
		name string
		dec  decodeFunc
		args []string
	}{
		{"qcow2", DecodeQCOW2, []string{"-O", "qcow2"}},
		{"qcow2-zlib", DecodeQCOW2, []string{"-O", "qcow2", "-c"}},
		{"vmdk", DecodeVMDK, []string{"-O", "vmdk", "-o", "subformat=streamOptimized"}},
		{"vhd", DecodeVHD, []string{"-O", "vpc", "-o", "force_size=on"}},
		{"vdi", DecodeVDI, []string{"-O", "vdi"}},
		{"vhdx", DecodeVHDX, []string{"-O", "vhdx", "-o", "block_size=1M"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "img")
			testimg.Run(t, "qemu-img", append(append([]string{"convert", "-q", "-f", "raw"}, c.args...), raw, img)...)
			decode := func(ctx context.Context, sink Sink) error {
				f, err := os.Open(img)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				done := make(chan error, 1)
				go func() { _, err := c.dec(ctx, f, sink, Options{}); done <- err }()
				select {
				case err := <-done:
					return err
				case <-time.After(20 * time.Second):
					t.Fatal("decode hangs")
				}
				return nil
			}
			s := &failingSink{}
			s.n.Store(3)
			if err := decode(context.Background(), s); !errors.Is(err, errSinkBroke) {
				t.Errorf("failing sink: %v, want its error", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if err := decode(ctx, &failingSink{cancel: cancel}); !errors.Is(err, errdefs.ErrCancelled) {
				t.Errorf("cancelled: %v, want ErrCancelled", err)
			}
		})
	}
}

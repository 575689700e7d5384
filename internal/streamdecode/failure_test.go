package streamdecode

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/diskimport/engine/errdefs"
)

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
	need(t, "qemu-img")
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
			run(t, "qemu-img", append(append([]string{"convert", "-q", "-f", "raw"}, c.args...), raw, img)...)
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

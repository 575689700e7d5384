package cloner_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/cloner"
	"github.com/diskimport/engine/internal/delta"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// FuzzTreeDeltaRecords: a filesystem volume's manifest and the sparse-v2
// records of its delta pass, as a hostile sender sends them, received the
// way the upload server's session applies them (a Start record at the
// offset held, then Data and Zero runs onto a delta.TreeTarget until the
// End record's digest) onto an empty volume on a tmpfs. Never a panic;
// every record decoded has non-negative fields and a data record its
// bytes; a stream that stops short is a malformed stream or an
// unexpected EOF; a pass that does not finish leaves the volume empty
// once closed, and one that finishes holds the digest its End named.
// Without root only the records are decoded.
func FuzzTreeDeltaRecords(f *testing.F) {
	manifest, records := treeDeltaSeed(f, cloner.NewEncoder)
	f.Add(manifest, records)
	f.Add(manifest, records[:len(records)/2])
	_, packed := treeDeltaSeed(f, cloner.NewRecordsEncoder) // data records packed
	f.Add(manifest, packed)
	f.Add(manifest, packed[:len(packed)/2])
	f.Add([]byte(`{"entries":[{"path":"a","kind":"file","size":4611686018427387904},{"path":"b","kind":"file","size":4611686018427387904},{"path":"c","kind":"file","size":4611686018427387904},{"path":"d","kind":"file","size":4611686018427387904}]}`), records)
	var volumes string
	if os.Geteuid() == 0 {
		volumes = testimg.Tmpfs(f, 64<<20)
	}
	f.Fuzz(func(t *testing.T, manifest, records []byte) {
		m, merr := delta.ReadManifest(bytes.NewReader(manifest))
		var tt *delta.TreeTarget
		var dir string
		if merr == nil && volumes != "" {
			var err error
			if dir, err = os.MkdirTemp(volumes, "v"); err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			if tt, err = delta.OpenTree(context.Background(), dir, m, ""); err != nil {
				tt = nil
			}
		}
		finished := applyRecords(t, cloner.NewDecoder(bytes.NewReader(records)), tt)
		if tt == nil {
			return
		}
		tt.Close()
		if names := testimg.DirNames(t, dir); !finished && len(names) != 0 {
			t.Fatalf("a pass closed unfinished left %v in the volume", names)
		}
	})
}

// applyRecords decodes records and, with tt, applies them as the upload
// server's delta session does; it reports whether the pass finished.
func applyRecords(t *testing.T, dec *cloner.Decoder, tt *delta.TreeTarget) bool {
	for i := 0; ; i++ {
		rec, err := dec.Next()
		if err != nil {
			if !cloner.IsMalformed(err) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("a stream that stops short is neither malformed nor cut off: %v", err)
			}
			return false
		}
		if rec.Size < 0 || rec.Offset < 0 || rec.Length < 0 || (rec.IsData() && int64(len(rec.Data)) != rec.Length) {
			t.Fatalf("record %q: size %d, offset %d, length %d, %d bytes", rec.Kind, rec.Size, rec.Offset, rec.Length, len(rec.Data))
		}
		if tt == nil {
			continue
		}
		switch {
		case i == 0 && (!rec.IsStart() || rec.Size != tt.Size() || rec.Offset != tt.Offset()):
			return false
		case i == 0:
		case rec.IsData():
			err = tt.Data(rec.Offset, rec.Data)
		case rec.IsZero():
			err = tt.Zero(rec.Offset, rec.Length)
		case rec.IsEnd():
			got, err := tt.Finish(rec.Digest)
			if err == nil && got != rec.Digest {
				t.Fatalf("the pass finished with %s, its End named %s", got, rec.Digest)
			}
			return err == nil
		default:
			return false
		}
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidImage) {
				t.Fatalf("a run refused, not as invalid: %v", err)
			}
			return false
		}
	}
}

// treeDeltaSeed is a small volume's manifest and the records of its
// whole pass onto an empty volume, as the sender makes them with encoder.
func treeDeltaSeed(f *testing.F, encoder func(io.Writer) *cloner.Encoder) (manifest, records []byte) {
	ctx := context.Background()
	src := f.TempDir()
	if err := os.Mkdir(filepath.Join(src, "vm"), 0o755); err != nil {
		f.Fatal(err)
	}
	testimg.Raw(f, filepath.Join(src, "vm"), "disk.img", 200<<10, 7)
	if err := os.WriteFile(filepath.Join(src, "small"), []byte("small file"), 0o644); err != nil {
		f.Fatal(err)
	}
	if err := os.Symlink("vm/disk.img", filepath.Join(src, "link")); err != nil {
		f.Fatal(err)
	}
	s, err := delta.OpenTreeSource(ctx, src)
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	if err := s.Sign(ctx); err != nil {
		f.Fatal(err)
	}
	var mb, rb bytes.Buffer
	if _, err := s.Manifest().WriteTo(&mb); err != nil {
		f.Fatal(err)
	}
	s.Plan(nil, nil)
	enc := encoder(&rb)
	if err := enc.Start(s.Size(), 0); err != nil {
		f.Fatal(err)
	}
	if err := s.Send(ctx, 0, enc); err != nil {
		f.Fatal(err)
	}
	if err := enc.End(s.Digest()); err != nil {
		f.Fatal(err)
	}
	return mb.Bytes(), rb.Bytes()
}

package delta_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/delta"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// fuzzVolumes is where the fuzz targets open volumes: a tmpfs (files of
// 2^62 bytes are allowed there, as on xfs and btrfs) of 64 MiB, so a
// manifest the capacity check lets through stages at most that much and
// holds its signatures; "" without root (no volume is opened then).
func fuzzVolumes(f *testing.F) string {
	if os.Geteuid() != 0 {
		return ""
	}
	return testimg.Tmpfs(f, 64<<20)
}

// FuzzTreeManifest: a filesystem volume's manifest as a sender sends it,
// and the receiver's answer as the sender reads it. Never a panic; a
// manifest is taken or refused as invalid or unsafe; a manifest taken
// lays out without wrapping; opened onto an empty volume and closed (the
// pass unfinished, or refused), it leaves the volume empty.
func FuzzTreeManifest(f *testing.F) {
	f.Add([]byte(`{"entries":[{"path":"a","kind":"dir","mode":493},{"path":"a/disk.img","kind":"file","mode":420,"size":70000},{"path":"l","kind":"symlink","link":"a/disk.img"}]}`), []byte{})
	f.Add([]byte(`{"entries":[{"path":"a","kind":"file","size":4611686018427387904},{"path":"b","kind":"file","size":4611686018427387904},{"path":"c","kind":"file","size":4611686018427387904},{"path":"d","kind":"file","size":4611686018427387904}]}`), []byte{})
	f.Add([]byte(`{"entries":[{"path":"a","kind":"file","size":9223372036854775807}]}`), []byte{})
	f.Add([]byte(`{"entries":[{"path":"s","kind":"file","size":3}],"digests":["blk-sha256:00"]}`), []byte{})
	answer := binary.BigEndian.AppendUint64(nil, uint64(len(`{"base":true,"files":[0]}`)))
	answer = append(answer, `{"base":true,"files":[0]}`...)
	answer = append(answer, "DSIG1\x00\x00\x00"...)
	answer = binary.BigEndian.AppendUint64(answer, 70000)
	f.Add([]byte(`{"entries":[{"path":"disk.img","kind":"file","mode":420,"size":70000}]}`), answer)
	volumes := fuzzVolumes(f)
	f.Fuzz(func(t *testing.T, manifest, answer []byte) {
		m, err := delta.ReadManifest(bytes.NewReader(manifest))
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidImage) && !errors.Is(err, errdefs.ErrUnsafeImage) {
				t.Fatalf("a manifest refused neither as invalid nor as unsafe: %v", err)
			}
			return
		}
		l, err := m.LayOut()
		if err != nil {
			t.Fatalf("a manifest taken does not lay out: %v", err)
		}
		end := int64(0)
		for k, i := range l.Files {
			if l.Bases[k] != end || l.Bases[k]%delta.BlockSize != 0 {
				t.Fatalf("file %d at %d, the one before ends at %d", k, l.Bases[k], end)
			}
			end += delta.Blocks(m.Entries[i].Size) * delta.BlockSize
		}
		if end != l.Size || l.Size < 0 {
			t.Fatalf("layout of %d bytes, its files take %d", l.Size, end)
		}
		// The sender reads the answer against its own manifest (the sizes
		// of files it holds): only manifests of files it could hold here.
		if l.Size <= 64<<20 {
			_, _, _ = delta.ReadTreeAnswer(bytes.NewReader(answer), m)
		}
		if volumes == "" {
			return
		}
		dir, err := os.MkdirTemp(volumes, "v")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		tt, err := delta.OpenTree(context.Background(), dir, m, "")
		if err == nil {
			tt.Close()
		}
		if names := testimg.DirNames(t, dir); len(names) != 0 {
			t.Fatalf("the pass, refused (%v) or closed unfinished, left %v in the volume", err, names)
		}
	})
}

//go:build linux

package delta

import (
	"context"
	"fmt"
	"os"
	"reflect"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/internal/blkhash"
)

// TreeSource is a filesystem volume's delta pass, sending end: the
// volume's manifest, its regular files open and signed, and the runs each
// file's target needs.
type TreeSource struct {
	dir    string
	m      *Manifest
	layout Layout
	files  []*os.File
	stamps []Stamp
	sigs   []*Signature
	runs   [][]Run
	moved  bool
}

// OpenTreeSource scans the volume mounted at dir and opens its regular
// files, taking each one's stamp before it is first read.
func OpenTreeSource(ctx context.Context, dir string) (*TreeSource, error) {
	m, err := ScanTree(ctx, dir)
	if err != nil {
		return nil, err
	}
	layout, err := m.LayOut()
	if err != nil {
		return nil, fmt.Errorf("filesystem volume %s: %w", dir, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("filesystem volume %s: %w", dir, err)
	}
	defer root.Close()
	s := &TreeSource{dir: dir, m: m, layout: layout}
	for _, i := range s.layout.Files {
		f, err := root.OpenFile(m.Entries[i].Path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("opening %s in %s: %w", m.Entries[i].Path, dir, err)
		}
		s.files = append(s.files, f)
		s.stamps = append(s.stamps, StampSource(f))
	}
	return s, nil
}

// Manifest is the volume's manifest.
func (s *TreeSource) Manifest() *Manifest { return s.m }

// Size is the layout's size: the address space of the pass's runs.
func (s *TreeSource) Size() int64 { return s.layout.Size }

// SignSmall signs the files of at most WholeFileMax bytes and names
// their digests in the manifest (Manifest.Digests), before it is sent.
func (s *TreeSource) SignSmall(ctx context.Context) error {
	s.sigs = make([]*Signature, len(s.files))
	s.m.Digests = make([]string, len(s.files))
	for k := range s.files {
		if s.m.Entries[s.layout.Files[k]].Size > WholeFileMax {
			continue
		}
		if err := s.sign(ctx, k); err != nil {
			return err
		}
		s.m.Digests[k] = s.sigs[k].Digest.String()
	}
	return nil
}

// Sign signs the files SignSmall did not.
func (s *TreeSource) Sign(ctx context.Context) error {
	if s.sigs == nil {
		s.sigs = make([]*Signature, len(s.files))
	}
	for k := range s.files {
		if s.sigs[k] == nil {
			if err := s.sign(ctx, k); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *TreeSource) sign(ctx context.Context, k int) error {
	e := s.m.Entries[s.layout.Files[k]]
	sig, err := Sign(ctx, s.files[k], e.Size)
	if err != nil {
		return fmt.Errorf("signing %s in %s: %w", e.Path, s.dir, err)
	}
	s.sigs[k] = sig
	return nil
}

// Plan lists each file's runs against its base in the target: bases[k]
// for the k-th file compared in place, nothing for one kept, else an
// empty file (the file is sent whole). It returns what the pass amounts
// to.
func (s *TreeSource) Plan(bases map[int]*Signature, kept []int) Stats {
	st := Stats{}
	s.runs = make([][]Run, len(s.files))
	keep := map[int]bool{}
	for _, k := range kept {
		keep[k] = true
	}
	for k := range s.files {
		size := s.m.Entries[s.layout.Files[k]].Size
		base := bases[k]
		switch {
		case keep[k]:
			base = s.sigs[k]
		case base == nil:
			base = ZeroSignature(size)
		}
		s.runs[k] = Changes(s.sigs[k], base)
		c := Count(size, s.runs[k])
		st.Size += c.Size
		st.Blocks += c.Blocks
		st.BlocksChanged += c.BlocksChanged
		st.DataBytes += c.DataBytes
		st.ZeroBytes += c.ZeroBytes
	}
	return st
}

// Send gives sink the runs that end after from, at their place in the
// layout, reading the data as it goes (delta.Send: the hashes of what is
// read replace the signature's).
func (s *TreeSource) Send(ctx context.Context, from int64, sink Sink) error {
	for k, f := range s.files {
		base := s.layout.Bases[k]
		moved, err := Send(ctx, f, s.sigs[k], s.runs[k], from-base, shifted{sink, base})
		s.moved = s.moved || moved
		if err != nil {
			return err
		}
	}
	return nil
}

// shifted places a file's runs in the layout.
type shifted struct {
	sink Sink
	base int64
}

func (s shifted) Data(off int64, p []byte) error { return s.sink.Data(s.base+off, p) }
func (s shifted) Zero(off, n int64) error        { return s.sink.Zero(s.base+off, n) }

// Digest is the volume's digest as sent.
func (s *TreeSource) Digest() blkhash.Digest {
	digests := make([]blkhash.Digest, len(s.sigs))
	for k, sig := range s.sigs {
		digests[k] = sig.Digest
	}
	return TreeDigest(s.m, digests)
}

// Final tells, once the pass was sent, whether the volume held still
// while it ran: the same entries with the same sizes, modes and times,
// and each file unwritten (its stamp, or a second reading that gives the
// digest it was sent with). Otherwise the pass was a warm one.
func (s *TreeSource) Final(ctx context.Context) (bool, error) {
	if s.moved {
		return false, nil
	}
	again, err := ScanTree(ctx, s.dir)
	if err != nil {
		return false, err
	}
	if !reflect.DeepEqual(again.Entries, s.m.Entries) {
		return false, nil
	}
	for k, f := range s.files {
		if s.stamps[k].Trusted() {
			if !s.stamps[k].unchangedSince(f) {
				return false, nil
			}
			continue
		}
		d, err := blkhash.SumFile(ctx, f, s.sigs[k].Size, 0)
		if err != nil {
			return false, err
		}
		if d != s.sigs[k].Digest {
			return false, nil
		}
	}
	return true, nil
}

// Close closes the files.
func (s *TreeSource) Close() {
	for _, f := range s.files {
		f.Close()
	}
}

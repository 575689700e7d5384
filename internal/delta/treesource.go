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
// volume's manifest, its regular files signed, and the runs each file's
// target needs. A file is open only while it is read (signed, sent,
// checked again), one at a time, so a volume of more files than the
// process may hold open takes a pass; the stamp taken at its first
// opening tells a file replaced under another name at a later one.
type TreeSource struct {
	dir    string
	root   *os.Root
	m      *Manifest
	layout Layout
	stamps []Stamp
	sigs   []*Signature
	runs   [][]Run
	moved  bool
}

// OpenTreeSource scans the volume mounted at dir and opens each of its
// regular files once, taking its stamp before it is first read.
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
	s := &TreeSource{dir: dir, root: root, m: m, layout: layout}
	for k := range s.layout.Files {
		f, err := s.open(k)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.stamps = append(s.stamps, StampSource(f))
		f.Close()
	}
	return s, nil
}

// open opens the k-th file of the layout for reading.
func (s *TreeSource) open(k int) (*os.File, error) {
	p := s.m.Entries[s.layout.Files[k]].Path
	f, err := s.root.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s in %s: %w", p, s.dir, err)
	}
	return f, nil
}

// Manifest is the volume's manifest.
func (s *TreeSource) Manifest() *Manifest { return s.m }

// Size is the layout's size: the address space of the pass's runs.
func (s *TreeSource) Size() int64 { return s.layout.Size }

// SignSmall signs the files of at most WholeFileMax bytes and names
// their digests in the manifest (Manifest.Digests), before it is sent.
func (s *TreeSource) SignSmall(ctx context.Context) error {
	s.sigs = make([]*Signature, len(s.layout.Files))
	s.m.Digests = make([]string, len(s.layout.Files))
	for k := range s.layout.Files {
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
		s.sigs = make([]*Signature, len(s.layout.Files))
	}
	for k := range s.layout.Files {
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
	f, err := s.open(k)
	if err != nil {
		return err
	}
	defer f.Close()
	sig, err := Sign(ctx, f, e.Size)
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
	s.runs = make([][]Run, len(s.layout.Files))
	keep := map[int]bool{}
	for _, k := range kept {
		keep[k] = true
	}
	for k := range s.layout.Files {
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
	for k := range s.layout.Files {
		base := s.layout.Bases[k]
		if !hasRunAfter(s.runs[k], from-base) {
			continue
		}
		f, err := s.open(k)
		if err != nil {
			return err
		}
		moved, err := Send(ctx, f, s.sigs[k], s.runs[k], from-base, shifted{sink, base})
		f.Close()
		s.moved = s.moved || moved
		if err != nil {
			return err
		}
	}
	return nil
}

// hasRunAfter says whether a run ends after from.
func hasRunAfter(runs []Run, from int64) bool {
	return len(runs) > 0 && runs[len(runs)-1].Off+runs[len(runs)-1].Len > from
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
	for k := range s.layout.Files {
		same, err := s.unchanged(ctx, k)
		if err != nil || !same {
			return false, err
		}
	}
	return true, nil
}

// unchanged says whether the k-th file still has the bytes it was sent
// with: its stamp, or else a second reading.
func (s *TreeSource) unchanged(ctx context.Context, k int) (bool, error) {
	f, err := s.open(k)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if s.stamps[k].Trusted() {
		return s.stamps[k].unchangedSince(f), nil
	}
	d, err := blkhash.SumFile(ctx, f, s.sigs[k].Size, 0)
	if err != nil {
		return false, err
	}
	return d == s.sigs[k].Digest, nil
}

// Close closes the volume.
func (s *TreeSource) Close() {
	s.root.Close()
}

// Package testtar builds tar archives at test time from a known tree
// (files of varied content, directories, symlinks, hard links, modes and
// mtimes) and checks an extracted directory against that tree.
package testtar

import (
	"archive/tar"
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Member is one tar entry.
type Member struct {
	Name  string
	Type  byte
	Body  []byte
	Link  string
	Mode  int64
	MTime time.Time
	UID   int
	GID   int
}

// File is a regular file member.
func File(name string, body []byte) Member {
	return Member{Name: name, Type: tar.TypeReg, Body: body}
}

// Sample is a tree with every supported member type.
func Sample() []Member {
	t0 := time.Date(2019, 6, 7, 8, 9, 10, 0, time.UTC)
	rng := rand.New(rand.NewPCG(42, 43))
	random := make([]byte, 300_000)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	holey := append(append([]byte("head"), make([]byte, 1<<20)...), []byte("tail")...)
	return []Member{
		{Name: "etc/", Type: tar.TypeDir, Mode: 0o755, MTime: t0},
		{Name: "etc/config", Type: tar.TypeReg, Body: []byte("key=value\n"), Mode: 0o640, MTime: t0.Add(time.Minute)},
		{Name: "bin/", Type: tar.TypeDir, Mode: 0o711, MTime: t0.Add(2 * time.Minute)},
		{Name: "bin/run", Type: tar.TypeReg, Body: []byte("#!/bin/sh\nexit 0\n"), Mode: 0o755, MTime: t0.Add(3 * time.Minute)},
		{Name: "data/random.bin", Type: tar.TypeReg, Body: random, Mode: 0o600, MTime: t0.Add(4 * time.Minute)},
		{Name: "data/holey.img", Type: tar.TypeReg, Body: holey, Mode: 0o644, MTime: t0.Add(5 * time.Minute)},
		{Name: "data/", Type: tar.TypeDir, Mode: 0o750, MTime: t0.Add(6 * time.Minute)},
		{Name: "config-link", Type: tar.TypeSymlink, Link: "etc/config", MTime: t0},
		{Name: "data/up", Type: tar.TypeSymlink, Link: "../bin/run", MTime: t0},
		{Name: "bin/run-again", Type: tar.TypeLink, Link: "bin/run"},
	}
}

// Build writes the members as a tar stream (PAX where needed, so
// sub-second mtimes survive); a member's Mode 0 is 0644.
func Build(t testing.TB, ms []Member) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range ms {
		hdr := &tar.Header{Name: m.Name, Typeflag: m.Type, Linkname: m.Link, Mode: m.Mode, ModTime: m.MTime,
			Uid: m.UID, Gid: m.GID, Format: tar.FormatPAX}
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
		}
		if m.Type == tar.TypeReg {
			hdr.Size = int64(len(m.Body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Size > 0 {
			if _, err := tw.Write(m.Body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Write builds the members into dir/name and returns the path.
func Write(t testing.TB, dir, name string, ms []Member) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, Build(t, ms), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Verify fails the test unless dir holds exactly the members (plus extra,
// names of entries that were there before): content, modes, mtimes,
// symlink targets and hard-link identity.
func Verify(t testing.TB, dir string, ms []Member, extra ...string) {
	t.Helper()
	want := map[string]Member{}
	for _, m := range ms {
		want[filepath.Clean(m.Name)] = m
	}
	var got []string
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			rel, _ := filepath.Rel(dir, p)
			got = append(got, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantNames := map[string]bool{}
	for n := range want {
		wantNames[n] = true
	}
	for _, e := range extra {
		wantNames[e] = true
	}
	for _, g := range got {
		if !wantNames[g] {
			t.Errorf("%s: unexpected entry %s", dir, g)
		}
		delete(wantNames, g)
	}
	for n := range wantNames {
		t.Errorf("%s: missing entry %s", dir, n)
	}
	for name, m := range want {
		p := filepath.Join(dir, name)
		st, err := os.Lstat(p)
		if err != nil {
			continue // reported above
		}
		switch m.Type {
		case tar.TypeReg:
			b, err := os.ReadFile(p)
			if err != nil || !bytes.Equal(b, m.Body) {
				t.Errorf("%s: content differs (%d bytes, want %d; err %v)", name, len(b), len(m.Body), err)
			}
			fallthrough
		case tar.TypeDir:
			if st.Mode().Perm() != os.FileMode(m.Mode) {
				t.Errorf("%s: mode %o, want %o", name, st.Mode().Perm(), m.Mode)
			}
			if !st.ModTime().Equal(m.MTime) {
				t.Errorf("%s: mtime %v, want %v", name, st.ModTime(), m.MTime)
			}
		case tar.TypeSymlink:
			if target, err := os.Readlink(p); err != nil || target != m.Link {
				t.Errorf("%s: symlink to %q, want %q (%v)", name, target, m.Link, err)
			}
		case tar.TypeLink:
			other, err := os.Lstat(filepath.Join(dir, filepath.Clean(m.Link)))
			if err != nil || !os.SameFile(st, other) {
				t.Errorf("%s: not a hard link to %s", name, m.Link)
			}
		}
	}
}

// Hostile returns archives that try to write outside the extraction
// directory; outside is an absolute directory they aim at.
func Hostile(outside string) map[string][]Member {
	return map[string][]Member{
		"dotdot":   {{Name: "../escaped", Type: tar.TypeReg, Body: []byte("x")}},
		"absolute": {{Name: filepath.Join(outside, "abs"), Type: tar.TypeReg, Body: []byte("x")}},
		"symlink-then-write": {
			{Name: "ok.txt", Type: tar.TypeReg, Body: []byte("fine")},
			{Name: "s", Type: tar.TypeSymlink, Link: "/"},
			{Name: "s" + filepath.Join(outside, "through"), Type: tar.TypeReg, Body: []byte("x")},
		},
		"hardlink-passwd": {{Name: "h", Type: tar.TypeLink, Link: "/etc/passwd"}},
		"device":          {{Name: "ok.txt", Type: tar.TypeReg, Body: []byte("fine")}, {Name: "dev", Type: tar.TypeChar}},
	}
}

package iostage

import (
	"bytes"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// benchBuf is 64 MiB of incompressible bytes: hashing speed does not depend
// on content, and the size keeps it out of the CPU caches like a real stream.
func benchBuf(b *testing.B) []byte {
	b.Helper()
	buf := make([]byte, 64<<20)
	rand.NewChaCha8([32]byte{7}).Read(buf)
	return buf
}

// BenchmarkVerifier measures the checksum stage as the engine uses it: a
// Verifier behind an io.TeeReader, fed in 1 MiB reads.
func BenchmarkVerifier(b *testing.B) {
	data := benchBuf(b)
	for _, algo := range []string{"md5", "sha1", "sha256", "sha512"} {
		b.Run(algo, func(b *testing.B) {
			sum := Checksum{Algorithm: algo, Hex: strings.Repeat("0", digestHexLen[algo])}
			buf := make([]byte, 1<<20)
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				v := NewVerifier([]Checksum{sum})
				if _, err := io.CopyBuffer(io.Discard, io.TeeReader(bytes.NewReader(data), v), buf); err != nil {
					b.Fatal(err)
				}
				v.Verify() // a mismatch is expected; the digest is what costs
			}
		})
	}
}

// BenchmarkTailHolder compares a plain copy with the same copy through a
// TailHolder (holding back a 512-byte VHD footer) and a Counter: the
// overhead these stages add to the hot path, at the 4 MiB reads the target
// writer makes and at 64 KiB reads.
func BenchmarkTailHolder(b *testing.B) {
	data := benchBuf(b)
	for _, bs := range []int{64 << 10, 4 << 20} {
		buf := make([]byte, bs)
		name := map[int]string{64 << 10: "64KiB", 4 << 20: "4MiB"}[bs]
		b.Run("plain/"+name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				io.CopyBuffer(io.Discard, onlyReader{bytes.NewReader(data)}, buf)
			}
		})
		b.Run("tailholder/"+name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				t := NewTailHolder(bytes.NewReader(data), 512)
				io.CopyBuffer(io.Discard, onlyReader{t}, buf)
				if len(t.Tail()) != 512 {
					b.Fatal("tail not held")
				}
			}
		})
		b.Run("counter/"+name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				c := NewCounter(bytes.NewReader(data))
				io.CopyBuffer(io.Discard, onlyReader{c}, buf)
			}
		})
	}
}

// onlyReader hides WriterTo so io.CopyBuffer really goes through Read.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

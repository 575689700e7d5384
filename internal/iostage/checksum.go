package iostage

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"strings"

	"github.com/diskimport/engine/errdefs"
)

// Checksum is an expected digest, written "algorithm:hex" as in CDI's
// IMPORTER_CHECKSUM (md5, sha1, sha256 or sha512).
type Checksum struct {
	Algorithm string
	Hex       string
}

func (c Checksum) String() string { return c.Algorithm + ":" + c.Hex }

var digestHexLen = map[string]int{"md5": 32, "sha1": 40, "sha256": 64, "sha512": 128}

// ParseChecksum parses "algorithm:hex". The algorithm and hex digits are
// case-insensitive; the hex length must match the algorithm.
func ParseChecksum(s string) (Checksum, error) {
	algo, digest, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok || strings.Contains(digest, ":") {
		return Checksum{}, fmt.Errorf("checksum %q: want algorithm:hex, e.g. sha256:<64 hex digits>: %w", s, errdefs.ErrInvalidOptions)
	}
	algo = strings.ToLower(algo)
	digest = strings.ToLower(digest)
	want, known := digestHexLen[algo]
	if !known {
		return Checksum{}, fmt.Errorf("checksum %q: unsupported algorithm %q (md5, sha1, sha256, sha512): %w", s, algo, errdefs.ErrInvalidOptions)
	}
	if _, err := hex.DecodeString(digest); err != nil || len(digest) != want {
		return Checksum{}, fmt.Errorf("checksum %q: %s needs %d hex digits: %w", s, algo, want, errdefs.ErrInvalidOptions)
	}
	return Checksum{Algorithm: algo, Hex: digest}, nil
}

func newHash(algo string) hash.Hash {
	switch algo {
	case "md5":
		return md5.New()
	case "sha1":
		return sha1.New()
	case "sha512":
		return sha512.New()
	default:
		return sha256.New()
	}
}

// Verifier hashes everything written to it with each expected checksum's
// algorithm. It is an io.Writer so it can sit in an io.TeeReader under the
// decompressors: the digest is over the bytes as received.
type Verifier struct {
	want   []Checksum
	hashes []hash.Hash
}

// NewVerifier returns nil when there is nothing to verify; a nil *Verifier
// accepts writes and verifies successfully.
func NewVerifier(want []Checksum) *Verifier {
	if len(want) == 0 {
		return nil
	}
	v := &Verifier{want: want}
	for _, c := range want {
		v.hashes = append(v.hashes, newHash(c.Algorithm))
	}
	return v
}

func (v *Verifier) Write(p []byte) (int, error) {
	if v != nil {
		for _, h := range v.hashes {
			h.Write(p)
		}
	}
	return len(p), nil
}

// Verify compares the digests of everything written so far with the
// expected ones. It returns the verified checksums, or an error wrapping
// errdefs.ErrChecksumMismatch that states both values.
func (v *Verifier) Verify() ([]Checksum, error) {
	if v == nil {
		return nil, nil
	}
	for i, c := range v.want {
		got := hex.EncodeToString(v.hashes[i].Sum(nil))
		if got != c.Hex {
			return nil, fmt.Errorf("%w: %s expected %s, got %s", errdefs.ErrChecksumMismatch, c.Algorithm, c.Hex, got)
		}
	}
	return v.want, nil
}

// SHA256Prefix is the SHA-256 ("sha256:hex") of the first n bytes of r;
// fewer than n bytes is an errdefs.ErrTargetTooSmall (the side read back
// is shorter than what was copied).
func SHA256Prefix(r io.Reader, n int64) (string, error) {
	h := sha256.New()
	got, err := io.CopyBuffer(h, io.LimitReader(r, n), make([]byte, 1<<20))
	if err != nil {
		return "", err
	}
	if got != n {
		return "", fmt.Errorf("only %d of %d bytes could be read: %w", got, n, errdefs.ErrTargetTooSmall)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

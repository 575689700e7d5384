//go:build !amd64

package blkhash

// haveLanes is false: the 16-lane SHA-256 is written for amd64 only.
const haveLanes = false

func sha256x16(*[8][lanes]uint32, *byte, *[lanes]uint32, int) {
	panic("blkhash: sha256x16 without AVX-512")
}

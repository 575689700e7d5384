//go:build !amd64

package blkhash

// havePairs is false: the two-message SHA-256 is written for amd64 only.
const havePairs = false

func sha256x2(state *[2][8]uint32, p0, p1 *byte, blocks int) {
	panic("sha256x2: not on this architecture")
}

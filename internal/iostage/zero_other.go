//go:build !amd64

package iostage

const haveZero512 = false

func zeroBlocks512(p *byte, blocks int) bool { panic("zeroBlocks512 without AVX-512") }

//go:build !amd64

package iostage

const (
	haveZero512 = false
	haveZero256 = false
)

func zeroBlocks512(p *byte, blocks int) bool { panic("zeroBlocks512 without AVX-512") }
func zeroBlocks256(p *byte, blocks int) bool { panic("zeroBlocks256 without AVX2") }

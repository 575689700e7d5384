#include "textflag.h"

// func zeroBlocks512(p *byte, blocks int) bool
// Whether the blocks 256-byte blocks at p are all zeros: each block's
// four 64-byte words ORed together and tested, stopping at the first
// block that is not.
TEXT ·zeroBlocks512(SB), NOSPLIT, $0-17
	MOVQ p+0(FP), SI
	MOVQ blocks+8(FP), CX
	TESTQ CX, CX
	JZ   zero

loop:
	VMOVDQU64 (SI), Z0
	VMOVDQU64 128(SI), Z1
	VPORQ     64(SI), Z0, Z0
	VPORQ     192(SI), Z1, Z1
	VPORQ     Z1, Z0, Z0
	VPTESTMQ  Z0, Z0, K1
	KORTESTW  K1, K1
	JNZ       notZero
	ADDQ      $256, SI
	DECQ      CX
	JNZ       loop

zero:
	VZEROUPPER
	MOVB $1, ret+16(FP)
	RET

notZero:
	VZEROUPPER
	MOVB $0, ret+16(FP)
	RET

// func zeroBlocks256(p *byte, blocks int) bool
// zeroBlocks512 in AVX2: each block's eight 32-byte words ORed together.
TEXT ·zeroBlocks256(SB), NOSPLIT, $0-17
	MOVQ p+0(FP), SI
	MOVQ blocks+8(FP), CX
	TESTQ CX, CX
	JZ   zero2

loop2:
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y1
	VPOR    64(SI), Y0, Y0
	VPOR    96(SI), Y1, Y1
	VPOR    128(SI), Y0, Y0
	VPOR    160(SI), Y1, Y1
	VPOR    192(SI), Y0, Y0
	VPOR    224(SI), Y1, Y1
	VPOR    Y1, Y0, Y0
	VPTEST  Y0, Y0
	JNZ     notZero2
	ADDQ    $256, SI
	DECQ    CX
	JNZ     loop2

zero2:
	VZEROUPPER
	MOVB $1, ret+16(FP)
	RET

notZero2:
	VZEROUPPER
	MOVB $0, ret+16(FP)
	RET

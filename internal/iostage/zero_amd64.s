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

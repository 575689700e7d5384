#include "textflag.h"

// SHA-256's compression (FIPS 180-4, 6.2.2) of two messages at once with
// the SHA extensions: SHA256RNDS2 waits for the two rounds before it, so
// one message leaves the unit idle half the time, and the second
// message's rounds fill those cycles. Lane A's state is X1 (words
// A,B,E,F) and X2 (C,D,G,H), its message words X3-X6; lane B's X7, X8 and
// X9-X12. X0 is SHA256RNDS2's implicit input (message words plus round
// constants), X13 a temporary, X14 the byte swap of each word.

// ROUNDS4 runs four rounds of one lane; msg holds their message words
// and k is the offset of their round constants in k256x2.
#define ROUNDS4(abef, cdgh, msg, k) \
	MOVOU k(AX), X0 \
	PADDD msg, X0 \
	SHA256RNDS2 X0, abef, cdgh \
	PSHUFD $0x0e, X0, X0 \
	SHA256RNDS2 X0, cdgh, abef

// SCHEDULE turns wa, holding the words W[t-16..t-13], into W[t..t+3],
// with wb holding W[t-12..t-9], wc W[t-8..t-5] and wd W[t-4..t-1].
#define SCHEDULE(wa, wb, wc, wd) \
	SHA256MSG1 wb, wa \
	MOVO wd, X13 \
	PALIGNR $4, wc, X13 \
	PADDD X13, wa \
	SHA256MSG2 wd, wa

// GROUP runs rounds 4g..4g+3 of both lanes.
#define GROUP(ma, mb, k) \
	ROUNDS4(X1, X2, ma, k) \
	ROUNDS4(X7, X8, mb, k)

// LOADSTATE turns a lane's words a-h at off(DI) into ABEF and CDGH.
#define LOADSTATE(off, abef, cdgh) \
	MOVOU off(DI), abef \
	MOVOU off+16(DI), cdgh \
	PSHUFD $0xb1, abef, abef \
	PSHUFD $0x1b, cdgh, cdgh \
	MOVO abef, X13 \
	PALIGNR $8, cdgh, abef \
	PBLENDW $0xf0, X13, cdgh

// STORESTATE turns ABEF and CDGH back into words a-h at off(DI).
#define STORESTATE(off, abef, cdgh) \
	PSHUFD $0x1b, abef, abef \
	PSHUFD $0xb1, cdgh, cdgh \
	MOVO abef, X13 \
	PBLENDW $0xf0, cdgh, abef \
	PALIGNR $8, X13, cdgh \
	MOVOU abef, off(DI) \
	MOVOU cdgh, off+16(DI)

// LOADMSG loads a lane's 64-byte block at p, each word big-endian.
#define LOADMSG(p, m0, m1, m2, m3) \
	MOVOU 0(p), m0 \
	PSHUFB X14, m0 \
	MOVOU 16(p), m1 \
	PSHUFB X14, m1 \
	MOVOU 32(p), m2 \
	PSHUFB X14, m2 \
	MOVOU 48(p), m3 \
	PSHUFB X14, m3

// func sha256x2(state *[2][8]uint32, p0, p1 *byte, blocks int)
TEXT ·sha256x2(SB), NOSPLIT, $64-32
	MOVQ state+0(FP), DI
	MOVQ p0+8(FP), SI
	MOVQ p1+16(FP), DX
	MOVQ blocks+24(FP), CX
	LEAQ k256x2<>(SB), AX
	MOVOU flip<>(SB), X14
	LOADSTATE(0, X1, X2)
	LOADSTATE(32, X7, X8)
	TESTQ CX, CX
	JZ done

loop:
	MOVOU X1, 0(SP)
	MOVOU X2, 16(SP)
	MOVOU X7, 32(SP)
	MOVOU X8, 48(SP)
	LOADMSG(SI, X3, X4, X5, X6)
	LOADMSG(DX, X9, X10, X11, X12)
	GROUP(X3, X9, 0)
	GROUP(X4, X10, 16)
	GROUP(X5, X11, 32)
	GROUP(X6, X12, 48)
	SCHEDULE(X3, X4, X5, X6)
	SCHEDULE(X9, X10, X11, X12)
	GROUP(X3, X9, 64)
	SCHEDULE(X4, X5, X6, X3)
	SCHEDULE(X10, X11, X12, X9)
	GROUP(X4, X10, 80)
	SCHEDULE(X5, X6, X3, X4)
	SCHEDULE(X11, X12, X9, X10)
	GROUP(X5, X11, 96)
	SCHEDULE(X6, X3, X4, X5)
	SCHEDULE(X12, X9, X10, X11)
	GROUP(X6, X12, 112)
	SCHEDULE(X3, X4, X5, X6)
	SCHEDULE(X9, X10, X11, X12)
	GROUP(X3, X9, 128)
	SCHEDULE(X4, X5, X6, X3)
	SCHEDULE(X10, X11, X12, X9)
	GROUP(X4, X10, 144)
	SCHEDULE(X5, X6, X3, X4)
	SCHEDULE(X11, X12, X9, X10)
	GROUP(X5, X11, 160)
	SCHEDULE(X6, X3, X4, X5)
	SCHEDULE(X12, X9, X10, X11)
	GROUP(X6, X12, 176)
	SCHEDULE(X3, X4, X5, X6)
	SCHEDULE(X9, X10, X11, X12)
	GROUP(X3, X9, 192)
	SCHEDULE(X4, X5, X6, X3)
	SCHEDULE(X10, X11, X12, X9)
	GROUP(X4, X10, 208)
	SCHEDULE(X5, X6, X3, X4)
	SCHEDULE(X11, X12, X9, X10)
	GROUP(X5, X11, 224)
	SCHEDULE(X6, X3, X4, X5)
	SCHEDULE(X12, X9, X10, X11)
	GROUP(X6, X12, 240)
	MOVOU 0(SP), X13
	PADDD X13, X1
	MOVOU 16(SP), X13
	PADDD X13, X2
	MOVOU 32(SP), X13
	PADDD X13, X7
	MOVOU 48(SP), X13
	PADDD X13, X8
	ADDQ $64, SI
	ADDQ $64, DX
	DECQ CX
	JNZ loop

done:
	STORESTATE(0, X1, X2)
	STORESTATE(32, X7, X8)
	RET

// flip is PSHUFB's mask that byte-swaps each 32-bit word.
DATA flip<>+0(SB)/8, $0x0405060700010203
DATA flip<>+8(SB)/8, $0x0c0d0e0f08090a0b
GLOBL flip<>(SB), RODATA|NOPTR, $16

// k256x2 is SHA-256's round constants (FIPS 180-4, 4.2.2).
DATA k256x2<>+0(SB)/4, $0x428a2f98
DATA k256x2<>+4(SB)/4, $0x71374491
DATA k256x2<>+8(SB)/4, $0xb5c0fbcf
DATA k256x2<>+12(SB)/4, $0xe9b5dba5
DATA k256x2<>+16(SB)/4, $0x3956c25b
DATA k256x2<>+20(SB)/4, $0x59f111f1
DATA k256x2<>+24(SB)/4, $0x923f82a4
DATA k256x2<>+28(SB)/4, $0xab1c5ed5
DATA k256x2<>+32(SB)/4, $0xd807aa98
DATA k256x2<>+36(SB)/4, $0x12835b01
DATA k256x2<>+40(SB)/4, $0x243185be
DATA k256x2<>+44(SB)/4, $0x550c7dc3
DATA k256x2<>+48(SB)/4, $0x72be5d74
DATA k256x2<>+52(SB)/4, $0x80deb1fe
DATA k256x2<>+56(SB)/4, $0x9bdc06a7
DATA k256x2<>+60(SB)/4, $0xc19bf174
DATA k256x2<>+64(SB)/4, $0xe49b69c1
DATA k256x2<>+68(SB)/4, $0xefbe4786
DATA k256x2<>+72(SB)/4, $0x0fc19dc6
DATA k256x2<>+76(SB)/4, $0x240ca1cc
DATA k256x2<>+80(SB)/4, $0x2de92c6f
DATA k256x2<>+84(SB)/4, $0x4a7484aa
DATA k256x2<>+88(SB)/4, $0x5cb0a9dc
DATA k256x2<>+92(SB)/4, $0x76f988da
DATA k256x2<>+96(SB)/4, $0x983e5152
DATA k256x2<>+100(SB)/4, $0xa831c66d
DATA k256x2<>+104(SB)/4, $0xb00327c8
DATA k256x2<>+108(SB)/4, $0xbf597fc7
DATA k256x2<>+112(SB)/4, $0xc6e00bf3
DATA k256x2<>+116(SB)/4, $0xd5a79147
DATA k256x2<>+120(SB)/4, $0x06ca6351
DATA k256x2<>+124(SB)/4, $0x14292967
DATA k256x2<>+128(SB)/4, $0x27b70a85
DATA k256x2<>+132(SB)/4, $0x2e1b2138
DATA k256x2<>+136(SB)/4, $0x4d2c6dfc
DATA k256x2<>+140(SB)/4, $0x53380d13
DATA k256x2<>+144(SB)/4, $0x650a7354
DATA k256x2<>+148(SB)/4, $0x766a0abb
DATA k256x2<>+152(SB)/4, $0x81c2c92e
DATA k256x2<>+156(SB)/4, $0x92722c85
DATA k256x2<>+160(SB)/4, $0xa2bfe8a1
DATA k256x2<>+164(SB)/4, $0xa81a664b
DATA k256x2<>+168(SB)/4, $0xc24b8b70
DATA k256x2<>+172(SB)/4, $0xc76c51a3
DATA k256x2<>+176(SB)/4, $0xd192e819
DATA k256x2<>+180(SB)/4, $0xd6990624
DATA k256x2<>+184(SB)/4, $0xf40e3585
DATA k256x2<>+188(SB)/4, $0x106aa070
DATA k256x2<>+192(SB)/4, $0x19a4c116
DATA k256x2<>+196(SB)/4, $0x1e376c08
DATA k256x2<>+200(SB)/4, $0x2748774c
DATA k256x2<>+204(SB)/4, $0x34b0bcb5
DATA k256x2<>+208(SB)/4, $0x391c0cb3
DATA k256x2<>+212(SB)/4, $0x4ed8aa4a
DATA k256x2<>+216(SB)/4, $0x5b9cca4f
DATA k256x2<>+220(SB)/4, $0x682e6ff3
DATA k256x2<>+224(SB)/4, $0x748f82ee
DATA k256x2<>+228(SB)/4, $0x78a5636f
DATA k256x2<>+232(SB)/4, $0x84c87814
DATA k256x2<>+236(SB)/4, $0x8cc70208
DATA k256x2<>+240(SB)/4, $0x90befffa
DATA k256x2<>+244(SB)/4, $0xa4506ceb
DATA k256x2<>+248(SB)/4, $0xbef9a3f7
DATA k256x2<>+252(SB)/4, $0xc67178f2
GLOBL k256x2<>(SB), RODATA|NOPTR, $256

// func cpuidSHA() bool: CPUID leaf 7's EBX bit 29 (the SHA extensions),
// where the CPU has leaf 7.
TEXT ·cpuidSHA(SB), NOSPLIT, $0-1
	MOVL $0, AX
	CPUID
	CMPL AX, $7
	JB no
	MOVL $7, AX
	MOVL $0, CX
	CPUID
	SHRL $29, BX
	ANDL $1, BX
	MOVB BX, ret+0(FP)
	RET
no:
	MOVB $0, ret+0(FP)
	RET

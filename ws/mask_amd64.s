//go:build !purego

#include "textflag.h"

// func maskXOR(dst, src *byte, n int, key uint32)
//
// dst[i] = src[i] ^ key byte (i mod 4), key read little-endian (its low
// byte applies to src[0]), for i < n; dst may be src (in place). SSE2,
// which every amd64 CPU has. From 16 bytes on: 16 bytes at a time (64 from
// 256 bytes on, while 64 are left), and the
// last 16 bytes, loaded before the loop (so that in place they are still
// the input) and masked with the key turned to their offset, are stored
// last over the end. Below 16 bytes the same with 8, then 4 bytes, and the
// last 0-3 bytes one by one. Few branches depend on n, which varies from
// frame to frame. From 32 bytes on, when the CPU has AVX2 (useAVX2), the
// same with 32-byte registers: up to 256 bytes without a loop (2, 4 or 8
// blocks, from the start and from the end, all loaded before the first
// store); above, 128 bytes at a time, then 32, the last 32 stored last.
// Between the first Y register and VZEROUPPER only VEX forms (VMOVQ, not
// MOVQ): a legacy SSE instruction there costs a state transition, about
// 150 ns on some CPUs (asmcheck_test.go checks every path).
TEXT ·maskXOR(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVL key+24(FP), AX
	// BX: the key turned to offset n (mod 4), for the words that end at n.
	MOVL AX, BX
	MOVQ CX, R9
	ANDQ $3, CX
	SHLQ $3, CX
	RORL CX, BX
	MOVQ R9, CX
	CMPQ CX, $16
	JB   small
	CMPQ CX, $32
	JB   sse
	CMPB ·useAVX2(SB), $0
	JNE  avx2

sse:
	MOVQ       AX, X0
	PSHUFD     $0, X0, X0
	MOVQ       BX, X6
	PSHUFD     $0, X6, X6
	MOVOU      -16(SI)(CX*1), X5
	PXOR       X6, X5
	CMPQ       CX, $256
	JB         loop16

loop64:
	MOVOU 0(SI), X1
	MOVOU 16(SI), X2
	MOVOU 32(SI), X3
	MOVOU 48(SI), X4
	PXOR  X0, X1
	PXOR  X0, X2
	PXOR  X0, X3
	PXOR  X0, X4
	MOVOU X1, 0(DI)
	MOVOU X2, 16(DI)
	MOVOU X3, 32(DI)
	MOVOU X4, 48(DI)
	ADDQ  $64, SI
	ADDQ  $64, DI
	SUBQ  $64, CX
	CMPQ  CX, $64
	JAE   loop64
	CMPQ  CX, $16
	JB    last16

loop16:
	MOVOU 0(SI), X1
	PXOR  X0, X1
	MOVOU X1, 0(DI)
	ADDQ  $16, SI
	ADDQ  $16, DI
	SUBQ  $16, CX
	CMPQ  CX, $16
	JAE   loop16

last16:
	MOVOU X5, -16(DI)(CX*1)
	RET

avx2:
	VMOVQ        AX, X0
	VPBROADCASTD X0, Y0
	VMOVQ        BX, X6
	VPBROADCASTD X6, Y6
	// Up to 256 bytes without a loop: blocks from the start masked with
	// the key (their offsets are multiples of 32) and as many ending at n
	// masked with the key turned to n; every block is loaded before the
	// first store, so in place the overlaps are masked once, from the input.
	CMPQ CX, $64
	JA   avx2over64
	VMOVDQU 0(SI), Y1
	VMOVDQU -32(SI)(CX*1), Y2
	VPXOR   Y0, Y1, Y1
	VPXOR   Y6, Y2, Y2
	VMOVDQU Y1, 0(DI)
	VMOVDQU Y2, -32(DI)(CX*1)
	VZEROUPPER
	RET
avx2over64:
	CMPQ CX, $128
	JA   avx2over128
	VMOVDQU 0(SI), Y1
	VMOVDQU 32(SI), Y2
	VMOVDQU -64(SI)(CX*1), Y3
	VMOVDQU -32(SI)(CX*1), Y4
	VPXOR   Y0, Y1, Y1
	VPXOR   Y0, Y2, Y2
	VPXOR   Y6, Y3, Y3
	VPXOR   Y6, Y4, Y4
	VMOVDQU Y1, 0(DI)
	VMOVDQU Y2, 32(DI)
	VMOVDQU Y3, -64(DI)(CX*1)
	VMOVDQU Y4, -32(DI)(CX*1)
	VZEROUPPER
	RET
avx2over128:
	CMPQ CX, $256
	JA   avx2loop
	VMOVDQU 0(SI), Y1
	VMOVDQU 32(SI), Y2
	VMOVDQU 64(SI), Y3
	VMOVDQU 96(SI), Y4
	VMOVDQU -128(SI)(CX*1), Y7
	VMOVDQU -96(SI)(CX*1), Y8
	VMOVDQU -64(SI)(CX*1), Y9
	VMOVDQU -32(SI)(CX*1), Y10
	VPXOR   Y0, Y1, Y1
	VPXOR   Y0, Y2, Y2
	VPXOR   Y0, Y3, Y3
	VPXOR   Y0, Y4, Y4
	VPXOR   Y6, Y7, Y7
	VPXOR   Y6, Y8, Y8
	VPXOR   Y6, Y9, Y9
	VPXOR   Y6, Y10, Y10
	VMOVDQU Y1, 0(DI)
	VMOVDQU Y2, 32(DI)
	VMOVDQU Y3, 64(DI)
	VMOVDQU Y4, 96(DI)
	VMOVDQU Y7, -128(DI)(CX*1)
	VMOVDQU Y8, -96(DI)(CX*1)
	VMOVDQU Y9, -64(DI)(CX*1)
	VMOVDQU Y10, -32(DI)(CX*1)
	VZEROUPPER
	RET
avx2loop:
	VMOVDQU      -32(SI)(CX*1), Y5
	VPXOR        Y6, Y5, Y5
loop128:
	VMOVDQU 0(SI), Y1
	VMOVDQU 32(SI), Y2
	VMOVDQU 64(SI), Y3
	VMOVDQU 96(SI), Y4
	VPXOR   Y0, Y1, Y1
	VPXOR   Y0, Y2, Y2
	VPXOR   Y0, Y3, Y3
	VPXOR   Y0, Y4, Y4
	VMOVDQU Y1, 0(DI)
	VMOVDQU Y2, 32(DI)
	VMOVDQU Y3, 64(DI)
	VMOVDQU Y4, 96(DI)
	ADDQ    $128, SI
	ADDQ    $128, DI
	SUBQ    $128, CX
	CMPQ    CX, $128
	JAE     loop128
	CMPQ    CX, $32
	JB      last32

loop32:
	VMOVDQU 0(SI), Y1
	VPXOR   Y0, Y1, Y1
	VMOVDQU Y1, 0(DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $32, CX
	CMPQ    CX, $32
	JAE     loop32

last32:
	VMOVDQU Y5, -32(DI)(CX*1)
	VZEROUPPER
	RET

small:
	CMPQ CX, $8
	JB   small4
	MOVQ AX, DX
	SHLQ $32, DX
	ORQ  AX, DX
	MOVQ BX, R8
	SHLQ $32, R8
	ORQ  BX, R8
	MOVQ -8(SI)(CX*1), R10
	XORQ R8, R10
	MOVQ 0(SI), R11
	XORQ DX, R11
	MOVQ R11, 0(DI)
	MOVQ R10, -8(DI)(CX*1)
	RET

small4:
	CMPQ CX, $4
	JB   bytes
	MOVL -4(SI)(CX*1), R10
	XORL BX, R10
	MOVL 0(SI), R11
	XORL AX, R11
	MOVL R11, 0(DI)
	MOVL R10, -4(DI)(CX*1)
	RET

bytes:
	TESTQ CX, CX
	JE    done
	MOVB  0(SI), R10
	XORB  AX, R10
	MOVB  R10, 0(DI)
	INCQ  SI
	INCQ  DI
	SHRL  $8, AX
	DECQ  CX
	JMP   bytes

done:
	RET

// func maskCopyHi(dst, src *byte, n int, key uint32) uint64
//
// maskXOR for dst != src (n > 0) that also returns a value that is 0 if
// and only if every byte written is below 0x80: the copy (key 0) or the
// unmasking of a received frame and the ASCII check of its text in one
// pass (Receive). The same blocks as maskXOR's, each ORed into an
// accumulator before it is stored.
TEXT ·maskCopyHi(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVL key+24(FP), AX
	MOVL AX, BX
	MOVQ CX, R9
	ANDQ $3, CX
	SHLQ $3, CX
	RORL CX, BX
	MOVQ R9, CX
	CMPQ CX, $16
	JB   hsmall
	CMPQ CX, $32
	JB   hsse
	CMPB ·useAVX2(SB), $0
	JNE  havx2

hsse:
	MOVQ   AX, X0
	PSHUFD $0, X0, X0
	MOVQ   BX, X6
	PSHUFD $0, X6, X6
	MOVOU  -16(SI)(CX*1), X5
	PXOR   X6, X5
	MOVOU  X5, X7

hloop16:
	MOVOU 0(SI), X1
	PXOR  X0, X1
	POR   X1, X7
	MOVOU X1, 0(DI)
	ADDQ  $16, SI
	ADDQ  $16, DI
	SUBQ  $16, CX
	CMPQ  CX, $16
	JAE   hloop16
	MOVOU    X5, -16(DI)(CX*1)
	PMOVMSKB X7, AX
	MOVQ     AX, ret+32(FP)
	RET

havx2:
	VMOVQ        AX, X0
	VPBROADCASTD X0, Y0
	VMOVQ        BX, X6
	VPBROADCASTD X6, Y6
	CMPQ CX, $64
	JA   havx2over64
	VMOVDQU   0(SI), Y1
	VMOVDQU   -32(SI)(CX*1), Y2
	VPXOR     Y0, Y1, Y1
	VPXOR     Y6, Y2, Y2
	VMOVDQU   Y1, 0(DI)
	VMOVDQU   Y2, -32(DI)(CX*1)
	VPOR      Y1, Y2, Y1
	VPMOVMSKB Y1, AX
	MOVQ      AX, ret+32(FP)
	VZEROUPPER
	RET
havx2over64:
	CMPQ CX, $128
	JA   havx2over128
	VMOVDQU   0(SI), Y1
	VMOVDQU   32(SI), Y2
	VMOVDQU   -64(SI)(CX*1), Y3
	VMOVDQU   -32(SI)(CX*1), Y4
	VPXOR     Y0, Y1, Y1
	VPXOR     Y0, Y2, Y2
	VPXOR     Y6, Y3, Y3
	VPXOR     Y6, Y4, Y4
	VMOVDQU   Y1, 0(DI)
	VMOVDQU   Y2, 32(DI)
	VMOVDQU   Y3, -64(DI)(CX*1)
	VMOVDQU   Y4, -32(DI)(CX*1)
	VPOR      Y1, Y2, Y1
	VPOR      Y3, Y4, Y3
	VPOR      Y1, Y3, Y1
	VPMOVMSKB Y1, AX
	MOVQ      AX, ret+32(FP)
	VZEROUPPER
	RET
havx2over128:
	CMPQ CX, $256
	JA   havx2loop
	VMOVDQU   0(SI), Y1
	VMOVDQU   32(SI), Y2
	VMOVDQU   64(SI), Y3
	VMOVDQU   96(SI), Y4
	VMOVDQU   -128(SI)(CX*1), Y7
	VMOVDQU   -96(SI)(CX*1), Y8
	VMOVDQU   -64(SI)(CX*1), Y9
	VMOVDQU   -32(SI)(CX*1), Y10
	VPXOR     Y0, Y1, Y1
	VPXOR     Y0, Y2, Y2
	VPXOR     Y0, Y3, Y3
	VPXOR     Y0, Y4, Y4
	VPXOR     Y6, Y7, Y7
	VPXOR     Y6, Y8, Y8
	VPXOR     Y6, Y9, Y9
	VPXOR     Y6, Y10, Y10
	VMOVDQU   Y1, 0(DI)
	VMOVDQU   Y2, 32(DI)
	VMOVDQU   Y3, 64(DI)
	VMOVDQU   Y4, 96(DI)
	VMOVDQU   Y7, -128(DI)(CX*1)
	VMOVDQU   Y8, -96(DI)(CX*1)
	VMOVDQU   Y9, -64(DI)(CX*1)
	VMOVDQU   Y10, -32(DI)(CX*1)
	VPOR      Y1, Y2, Y1
	VPOR      Y3, Y4, Y3
	VPOR      Y7, Y8, Y7
	VPOR      Y9, Y10, Y9
	VPOR      Y1, Y3, Y1
	VPOR      Y7, Y9, Y7
	VPOR      Y1, Y7, Y1
	VPMOVMSKB Y1, AX
	MOVQ      AX, ret+32(FP)
	VZEROUPPER
	RET
havx2loop:
	VMOVDQU -32(SI)(CX*1), Y5
	VPXOR   Y6, Y5, Y5
	VMOVDQU Y5, Y11
hloop128:
	VMOVDQU 0(SI), Y1
	VMOVDQU 32(SI), Y2
	VMOVDQU 64(SI), Y3
	VMOVDQU 96(SI), Y4
	VPXOR   Y0, Y1, Y1
	VPXOR   Y0, Y2, Y2
	VPXOR   Y0, Y3, Y3
	VPXOR   Y0, Y4, Y4
	VMOVDQU Y1, 0(DI)
	VMOVDQU Y2, 32(DI)
	VMOVDQU Y3, 64(DI)
	VMOVDQU Y4, 96(DI)
	VPOR    Y1, Y2, Y1
	VPOR    Y3, Y4, Y3
	VPOR    Y1, Y11, Y11
	VPOR    Y3, Y11, Y11
	ADDQ    $128, SI
	ADDQ    $128, DI
	SUBQ    $128, CX
	CMPQ    CX, $128
	JAE     hloop128
	CMPQ    CX, $32
	JB      hlast32

hloop32:
	VMOVDQU 0(SI), Y1
	VPXOR   Y0, Y1, Y1
	VMOVDQU Y1, 0(DI)
	VPOR    Y1, Y11, Y11
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $32, CX
	CMPQ    CX, $32
	JAE     hloop32

hlast32:
	VMOVDQU   Y5, -32(DI)(CX*1)
	VPMOVMSKB Y11, AX
	MOVQ      AX, ret+32(FP)
	VZEROUPPER
	RET

hsmall:
	MOVQ $0x8080808080808080, R12
	CMPQ CX, $8
	JB   hsmall4
	MOVQ AX, DX
	SHLQ $32, DX
	ORQ  AX, DX
	MOVQ BX, R8
	SHLQ $32, R8
	ORQ  BX, R8
	MOVQ -8(SI)(CX*1), R10
	XORQ R8, R10
	MOVQ 0(SI), R11
	XORQ DX, R11
	MOVQ R11, 0(DI)
	MOVQ R10, -8(DI)(CX*1)
	ORQ  R10, R11
	ANDQ R12, R11
	MOVQ R11, ret+32(FP)
	RET

hsmall4:
	CMPQ CX, $4
	JB   hbytes
	MOVL -4(SI)(CX*1), R10
	XORL BX, R10
	MOVL 0(SI), R11
	XORL AX, R11
	MOVL R11, 0(DI)
	MOVL R10, -4(DI)(CX*1)
	ORL  R10, R11
	ANDL R12, R11
	MOVQ R11, ret+32(FP)
	RET

hbytes:
	XORL R11, R11
hbyte:
	TESTQ CX, CX
	JE    hdone
	MOVB  0(SI), R10
	XORB  AX, R10
	MOVB  R10, 0(DI)
	ORB   R10, R11
	INCQ  SI
	INCQ  DI
	SHRL  $8, AX
	DECQ  CX
	JMP   hbyte

hdone:
	ANDL $0x80, R11
	MOVQ R11, ret+32(FP)
	RET

// func copySmall(dst, src *byte, n int)
//
// copy for 1 <= n <= 256 under AVX2 (useAVX2), without a loop and without
// memmove's ladder of sizes: 2, 4 or 8 blocks of 32 bytes from the start
// and from the end, below 32 bytes two blocks of 16, 8 or 4, below 4 the
// first, middle and last byte; every block is loaded before the first
// store, so dst and src may overlap. AppendMessage's copy of a server's
// small payload.
TEXT ·copySmall(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	CMPQ CX, $32
	JB   csmall
	CMPQ CX, $64
	JA   cover64
	VMOVDQU 0(SI), Y1
	VMOVDQU -32(SI)(CX*1), Y2
	VMOVDQU Y1, 0(DI)
	VMOVDQU Y2, -32(DI)(CX*1)
	VZEROUPPER
	RET
cover64:
	CMPQ CX, $128
	JA   cover128
	VMOVDQU 0(SI), Y1
	VMOVDQU 32(SI), Y2
	VMOVDQU -64(SI)(CX*1), Y3
	VMOVDQU -32(SI)(CX*1), Y4
	VMOVDQU Y1, 0(DI)
	VMOVDQU Y2, 32(DI)
	VMOVDQU Y3, -64(DI)(CX*1)
	VMOVDQU Y4, -32(DI)(CX*1)
	VZEROUPPER
	RET
cover128:
	VMOVDQU 0(SI), Y1
	VMOVDQU 32(SI), Y2
	VMOVDQU 64(SI), Y3
	VMOVDQU 96(SI), Y4
	VMOVDQU -128(SI)(CX*1), Y5
	VMOVDQU -96(SI)(CX*1), Y6
	VMOVDQU -64(SI)(CX*1), Y7
	VMOVDQU -32(SI)(CX*1), Y8
	VMOVDQU Y1, 0(DI)
	VMOVDQU Y2, 32(DI)
	VMOVDQU Y3, 64(DI)
	VMOVDQU Y4, 96(DI)
	VMOVDQU Y5, -128(DI)(CX*1)
	VMOVDQU Y6, -96(DI)(CX*1)
	VMOVDQU Y7, -64(DI)(CX*1)
	VMOVDQU Y8, -32(DI)(CX*1)
	VZEROUPPER
	RET
csmall:
	CMPQ  CX, $16
	JB    csmall8
	MOVOU 0(SI), X1
	MOVOU -16(SI)(CX*1), X2
	MOVOU X1, 0(DI)
	MOVOU X2, -16(DI)(CX*1)
	RET
csmall8:
	CMPQ CX, $8
	JB   csmall4
	MOVQ 0(SI), R8
	MOVQ -8(SI)(CX*1), R9
	MOVQ R8, 0(DI)
	MOVQ R9, -8(DI)(CX*1)
	RET
csmall4:
	CMPQ CX, $4
	JB   csmall1
	MOVL 0(SI), R8
	MOVL -4(SI)(CX*1), R9
	MOVL R8, 0(DI)
	MOVL R9, -4(DI)(CX*1)
	RET
csmall1:
	MOVQ CX, DX
	SHRQ $1, DX
	MOVB 0(SI), R8
	MOVB 0(SI)(DX*1), R9
	MOVB -1(SI)(CX*1), R10
	MOVB R8, 0(DI)
	MOVB R9, 0(DI)(DX*1)
	MOVB R10, -1(DI)(CX*1)
	RET

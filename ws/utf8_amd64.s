//go:build !purego

#include "textflag.h"

// func asciiPrefixAsm(p *byte, n int) int
//
// Returns an i such that p[:i] is all ASCII and either i == n or p[i:]
// holds a byte >= 0x80 within its first 16 bytes: the start of the first
// block of 16 bytes (SSE2 PMOVMSKB) that has one. The remainder of under
// 16 bytes is checked with the last 16 bytes of p, overlapping the block
// before; below 16 bytes the same with 8 bytes, then one at a time. From
// 32 bytes on, when the CPU has AVX2 (useAVX2), blocks of 64, then 32 bytes
// (VPMOVMSKB), the last 32 overlapping, and i is the first byte >= 0x80
// itself; up to 256 bytes, the OR of 2, 4 or 8 blocks from the start and
// the end answers without a loop when all are ASCII.
TEXT ·asciiPrefixAsm(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	XORQ AX, AX
	CMPQ CX, $16
	JB   short
	CMPQ CX, $32
	JB   loop16
	CMPB ·useAVX2(SB), $0
	JNE  avx2

loop16:
	MOVOU    0(SI)(AX*1), X0
	PMOVMSKB X0, BX
	TESTL    BX, BX
	JNZ      done
	ADDQ     $16, AX
	LEAQ     16(AX), DX
	CMPQ     DX, CX
	JBE      loop16
	// Under 16 bytes left: the last 16 bytes.
	MOVOU    -16(SI)(CX*1), X0
	PMOVMSKB X0, BX
	TESTL    BX, BX
	JNZ      done
	MOVQ     CX, AX
	JMP      done

avx2:
	// Up to 256 bytes all ASCII without a loop: the OR of blocks from the
	// start and from the end (2, 4 or 8, overlapping); when a byte >= 0x80
	// is among them, the loops below find the first.
	CMPQ    CX, $64
	JA      avx2over64
	VMOVDQU 0(SI), Y0
	VMOVDQU -32(SI)(CX*1), Y1
	VPOR    Y0, Y1, Y1
	JMP     avx2test
avx2over64:
	CMPQ    CX, $128
	JA      avx2over128
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU -64(SI)(CX*1), Y2
	VMOVDQU -32(SI)(CX*1), Y3
	VPOR    Y0, Y1, Y1
	VPOR    Y2, Y3, Y3
	VPOR    Y1, Y3, Y1
	JMP     avx2test
avx2over128:
	CMPQ    CX, $256
	JA      loop64
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	VPOR    Y0, Y1, Y1
	VPOR    Y2, Y3, Y3
	VMOVDQU -128(SI)(CX*1), Y0
	VMOVDQU -96(SI)(CX*1), Y2
	VPOR    Y0, Y1, Y1
	VPOR    Y2, Y3, Y3
	VMOVDQU -64(SI)(CX*1), Y0
	VMOVDQU -32(SI)(CX*1), Y2
	VPOR    Y0, Y1, Y1
	VPOR    Y2, Y3, Y3
	VPOR    Y1, Y3, Y1
avx2test:
	VPMOVMSKB Y1, BX
	TESTL     BX, BX
	JNZ       avx2find
	VZEROUPPER
	MOVQ      CX, AX
	JMP       done
avx2find:
	CMPQ CX, $64
	JB   loop32

loop64:
	VMOVDQU   0(SI)(AX*1), Y0
	VMOVDQU   32(SI)(AX*1), Y1
	VPOR      Y0, Y1, Y1
	VPMOVMSKB Y1, BX
	TESTL     BX, BX
	JNZ       loop32 // a byte >= 0x80 in these 64: find it
	ADDQ      $64, AX
	LEAQ      64(AX), DX
	CMPQ      DX, CX
	JBE       loop64
	LEAQ      32(AX), DX
	CMPQ      DX, CX
	JA        tail32

loop32:
	VMOVDQU   0(SI)(AX*1), Y0
	VPMOVMSKB Y0, BX
	TESTL     BX, BX
	JNZ       found32
	ADDQ      $32, AX
	LEAQ      32(AX), DX
	CMPQ      DX, CX
	JBE       loop32

tail32:
	// Under 32 bytes left: the last 32 bytes.
	VMOVDQU   -32(SI)(CX*1), Y0
	VPMOVMSKB Y0, BX
	VZEROUPPER
	TESTL     BX, BX
	JNZ       foundtail
	MOVQ      CX, AX
	JMP       done

found32:
	VZEROUPPER
	BSFL BX, BX
	ADDQ BX, AX
	JMP  done

foundtail:
	BSFL BX, BX
	LEAQ -32(CX)(BX*1), AX
	JMP  done

short:
	CMPQ  CX, $8
	JB    bytes
	MOVQ  $0x8080808080808080, R8
	MOVQ  0(SI), BX
	TESTQ R8, BX
	JNZ   done
	MOVQ  -8(SI)(CX*1), BX
	TESTQ R8, BX
	JNZ   done
	MOVQ  CX, AX
	JMP   done

bytes:
	CMPQ    AX, CX
	JAE     done
	MOVBLZX 0(SI)(AX*1), BX
	TESTB   $0x80, BX
	JNZ     done
	INCQ    AX
	JMP     bytes

done:
	MOVQ AX, ret+16(FP)
	RET

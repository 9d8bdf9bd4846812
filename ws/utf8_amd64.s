//go:build !purego

#include "textflag.h"

// func asciiPrefixAsm(p *byte, n int) int
//
// Returns an i such that p[:i] is all ASCII and either i == n or p[i:]
// holds a byte >= 0x80 within its first 16 bytes: the start of the first
// block of 16 bytes (SSE2 PMOVMSKB) that has one. The remainder of under
// 16 bytes is checked with the last 16 bytes of p, overlapping the block
// before; below 16 bytes the same with 8 bytes, then one at a time.
TEXT ·asciiPrefixAsm(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	XORQ AX, AX
	CMPQ CX, $16
	JB   short

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

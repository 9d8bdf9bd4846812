//go:build !purego

#include "textflag.h"

// func cpuAVX2() bool
//
// Reports whether the CPU has AVX2 and the operating system saves the
// 256-bit registers: CPUID leaf 1 (AVX, OSXSAVE), XGETBV (XCR0 bits 1 and
// 2: SSE and AVX state) and CPUID leaf 7 (AVX2, EBX bit 5).
TEXT ·cpuAVX2(SB), NOSPLIT, $0-1
	XORL AX, AX
	XORL CX, CX
	CPUID
	CMPL AX, $7
	JB   no
	MOVL $1, AX
	XORL CX, CX
	CPUID
	ANDL $0x18000000, CX // bits 27 (OSXSAVE) and 28 (AVX)
	CMPL CX, $0x18000000
	JNE  no
	XORL CX, CX
	XGETBV
	ANDL $6, AX
	CMPL AX, $6
	JNE  no
	MOVL $7, AX
	XORL CX, CX
	CPUID
	ANDL $0x20, BX
	JZ   no
	MOVB $1, ret+0(FP)
	RET

no:
	MOVB $0, ret+0(FP)
	RET

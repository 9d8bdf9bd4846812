//go:build !purego

#include "textflag.h"

// func marks64(p *byte) (colons, backslashes uint64)
//
// Bit i of colons (backslashes) is set when p[i] is ':' ('\\'), for the 64
// bytes at p: four 16-byte compares each (SSE2, which every amd64 has).
TEXT ·marks64(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ $0x3a3a3a3a3a3a3a3a, AX
	MOVQ AX, X6
	PUNPCKLQDQ X6, X6
	MOVQ $0x5c5c5c5c5c5c5c5c, AX
	MOVQ AX, X7
	PUNPCKLQDQ X7, X7

	MOVOU 0(SI), X0
	MOVOU X0, X1
	PCMPEQB X6, X0
	PCMPEQB X7, X1
	PMOVMSKB X0, AX
	PMOVMSKB X1, BX

	MOVOU 16(SI), X0
	MOVOU X0, X1
	PCMPEQB X6, X0
	PCMPEQB X7, X1
	PMOVMSKB X0, CX
	PMOVMSKB X1, DX
	SHLQ $16, CX
	SHLQ $16, DX
	ORQ CX, AX
	ORQ DX, BX

	MOVOU 32(SI), X0
	MOVOU X0, X1
	PCMPEQB X6, X0
	PCMPEQB X7, X1
	PMOVMSKB X0, CX
	PMOVMSKB X1, DX
	SHLQ $32, CX
	SHLQ $32, DX
	ORQ CX, AX
	ORQ DX, BX

	MOVOU 48(SI), X0
	MOVOU X0, X1
	PCMPEQB X6, X0
	PCMPEQB X7, X1
	PMOVMSKB X0, CX
	PMOVMSKB X1, DX
	SHLQ $48, CX
	SHLQ $48, DX
	ORQ CX, AX
	ORQ DX, BX

	MOVQ AX, colons+8(FP)
	MOVQ BX, backslashes+16(FP)
	RET

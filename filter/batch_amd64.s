//go:build !purego

#include "textflag.h"

// func prefetchBlocks(words *uint64, blocks uint64, hs *uint64, n int)
TEXT ·prefetchBlocks(SB), NOSPLIT|NOFRAME, $0-32
	MOVQ words+0(FP), AX
	MOVQ blocks+8(FP), R8
	MOVQ hs+16(FP), BX
	MOVQ n+24(FP), CX
	TESTQ CX, CX
	JLE done
loop:
	MOVQ (BX), DX
	SHRQ $32, DX
	IMULQ R8, DX
	SHRQ $32, DX
	SHLQ $6, DX
	PREFETCHT0 (AX)(DX*1)
	ADDQ $8, BX
	DECQ CX
	JNZ loop
done:
	RET

// func probeBlocks(words *uint64, blocks uint64, k uint64, hs *uint64, out *bool, n int) int
//
// For each of the n hashes: the block (h>>32)*blocks>>32, then k times
// h *= probeMul, bit h>>55 of the block tested (BTQ on word h>>61, which
// takes the bit number mod 64) and counted (ADCQ); out[i] = all k set. No
// branch depends on the table's contents.
TEXT ·probeBlocks(SB), NOSPLIT|NOFRAME, $0-56
	MOVQ words+0(FP), AX
	MOVQ blocks+8(FP), R8
	MOVQ hs+24(FP), BX
	MOVQ out+32(FP), DI
	MOVQ n+40(FP), CX
	MOVQ $0x9E3779B97F4A7C15, R13
	MOVQ $0, ret+48(FP)
	TESTQ CX, CX
	JLE pdone
key:
	MOVQ (BX), R10
	MOVQ R10, R11
	SHRQ $32, R11
	IMULQ R8, R11
	SHRQ $32, R11
	SHLQ $6, R11
	ADDQ AX, R11
	MOVQ k+16(FP), R12
	XORL R9, R9
probe:
	IMULQ R13, R10
	MOVQ R10, DX
	SHRQ $61, DX
	MOVQ (R11)(DX*8), DX
	MOVQ R10, SI
	SHRQ $55, SI
	BTQ SI, DX
	ADCQ $0, R9
	DECQ R12
	JNZ probe
	CMPQ R9, k+16(FP)
	SETEQ (DI)
	SETEQ DL
	MOVBQZX DL, DX
	ADDQ DX, ret+48(FP)
	ADDQ $8, BX
	INCQ DI
	DECQ CX
	JNZ key
pdone:
	RET

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

// func probeBlocksAVX512(words *uint64, blocks uint64, k uint64, hs *uint64, out *bool, n int, powers *[16]uint64) int
//
// probeBlocks for 1 <= k <= 16 with AVX-512 (F and DQ): the k probe products
// of a key are h*probeMul^i for i = 1..k, so they are computed at once
// (VPMULLQ by powers, eight lanes per register); bit h_i>>55 of the block
// is brought to bit 0 of each lane by a permute of the block's words (word
// h_i>>61, VPERMQ takes the index mod 8) and a rotate (VPRORVQ, mod 64),
// and tested (VPTESTMQ). Lanes k+1..16 are masked off. No branch depends on
// the table's contents.
TEXT ·probeBlocksAVX512(SB), NOSPLIT|NOFRAME, $0-64
	MOVQ words+0(FP), AX
	MOVQ blocks+8(FP), R8
	MOVQ k+16(FP), R12
	MOVQ hs+24(FP), BX
	MOVQ out+32(FP), DI
	MOVQ n+40(FP), CX
	MOVQ powers+48(FP), SI
	XORQ R15, R15 // keys found
	TESTQ CX, CX
	JLE vdone
	VMOVDQU64 0(SI), Z8
	VMOVDQU64 64(SI), Z9
	MOVQ $1, DX
	VPBROADCASTQ DX, Z12
	// R13: the mask of lanes 9..16 in use, R14: of lanes 1..8.
	MOVQ $0xff, R14
	XORQ R13, R13
	CMPQ R12, $8
	JGT wide
	MOVQ R12, DX
	MOVQ $1, R14
	SHLXQ DX, R14, R14
	DECQ R14
	JMP masks
wide:
	LEAQ -8(R12), DX
	MOVQ $1, R13
	SHLXQ DX, R13, R13
	DECQ R13
masks:
	KMOVB R14, K1
	KMOVB R13, K2
vkey:
	MOVQ (BX), R10
	MOVQ R10, R11
	SHRQ $32, R11
	IMULQ R8, R11
	SHRQ $32, R11
	SHLQ $6, R11
	VMOVDQU64 (AX)(R11*1), Z0
	VPBROADCASTQ R10, Z1
	VPMULLQ Z8, Z1, Z2
	VPMULLQ Z9, Z1, Z3
	VPSRLQ $55, Z2, Z2
	VPSRLQ $55, Z3, Z3
	VPSRLQ $6, Z2, Z4
	VPSRLQ $6, Z3, Z5
	VPERMQ Z0, Z4, Z4
	VPERMQ Z0, Z5, Z5
	VPRORVQ Z2, Z4, Z4
	VPRORVQ Z3, Z5, Z5
	VPTESTMQ Z12, Z4, K1, K3
	VPTESTMQ Z12, Z5, K2, K4
	KMOVB K3, DX
	KMOVB K4, R9
	XORQ R14, DX
	XORQ R13, R9
	ORQ R9, DX
	SETEQ (DI)
	SETEQ DL
	MOVBQZX DL, DX
	ADDQ DX, R15
	ADDQ $8, BX
	INCQ DI
	DECQ CX
	JNZ vkey
	VZEROUPPER
vdone:
	MOVQ R15, ret+56(FP)
	RET

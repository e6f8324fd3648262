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

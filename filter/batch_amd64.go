//go:build !purego

package filter

import "golang.org/x/sys/cpu"

// The batched lookup's inner loops in assembly (batch_amd64.s):
// batch_other.go is the portable twin (other architectures, and build tag
// purego). TestProbeAllMatches checks every probe against a plain reference.

// prefetch asks the CPU to start loading the block of every hash in hs
// (PREFETCHT0). A prefetch has no result and retires at once, so unlike a
// load it does not hold up the instructions after it while its miss is
// outstanding: a whole group's misses are in flight together.
func (f *Bloom) prefetch(hs []uint64) {
	if len(hs) > 0 {
		prefetchBlocks(&f.words[0], f.blocks, &hs[0], len(hs))
	}
}

// probeAll sets out[i] to MayContainHash(hs[i]) (len(out) >= len(hs)) and
// returns how many are true. Unlike MayContainHash it tests all K bits of
// every key, with no branch on any of them: a batch's answers are
// unpredictable, and a mispredicted early exit would throw away the work on
// the keys after it. The Go compiler spills the probe's state to the stack
// on every bit, which the assembly does not.
func (f *Bloom) probeAll(hs []uint64, out []bool) int {
	out = out[:len(hs)]
	if len(hs) == 0 {
		return 0
	}
	if useAVX512 && f.k <= uint32(len(probePowers)) {
		return probeBlocksAVX512(&f.words[0], f.blocks, uint64(f.k), &hs[0], &out[0], len(hs), &probePowers)
	}
	return probeBlocks(&f.words[0], f.blocks, uint64(f.k), &hs[0], &out[0], len(hs))
}

// useAVX512 selects probeBlocksAVX512, which tests a key's K bits at once
// instead of one after the other (0.80–0.85× the batch's time per key on the
// machine of docs/benchmarks.md). Tests turn it off to check both.
var useAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ && cpu.X86.HasBMI2

// probePowers[i] is probeMul^(i+1): the product the (i+1)-th probe of
// MayContainHash reaches by repeated multiplication, for
// probeBlocksAVX512's lanes.
var probePowers = func() (p [16]uint64) {
	m := uint64(1)
	for i := range p {
		m *= probeMul
		p[i] = m
	}
	return p
}()

// prefetchBlocks prefetches block (h>>32)*blocks>>32 of words for each of the
// n hashes at hs. Each block index is below blocks, so it reads only words.
//
//go:noescape
func prefetchBlocks(words *uint64, blocks uint64, hs *uint64, n int)

// probeBlocks probes the n hashes at hs into out, k bits each, and returns
// how many were all set. Each block index is below blocks, so it reads only
// words.
//
//go:noescape
func probeBlocks(words *uint64, blocks, k uint64, hs *uint64, out *bool, n int) int

// probeBlocksAVX512 is probeBlocks for 1 <= k <= 16 on a CPU with AVX-512
// F and DQ and BMI2 (useAVX512). powers is probePowers.
//
//go:noescape
func probeBlocksAVX512(words *uint64, blocks, k uint64, hs *uint64, out *bool, n int, powers *[16]uint64) int

package filter

import (
	"fmt"
	"math"
)

// Sizing formulas.
//
// A classic Bloom filter of m bits with k hash functions holding n keys has a
// false-positive rate
//
//	p = (1 - e^(-kn/m))^k
//
// which is smallest at k = (m/n)·ln 2, giving m = -n·ln p / (ln 2)².
// The information-theoretic minimum for any filter is n·log2(1/p) bits; a
// classic Bloom filter needs 1/ln 2 ≈ 1.44× that.
//
// Bloom is a blocked filter: each key sets its k bits inside one 512-bit
// block (one cache line). Blocks receive a Poisson-distributed number of keys
// (mean λ = n/blocks), and overfull blocks raise the false-positive rate, so
// for the same p a blocked filter needs a few more bits than the classic
// formula. Its rate is
//
//	p = Σ_i Pois(i; λ) · E[Y_i^k]
//
// where Y_i is the fraction of set bits in a block holding i keys; E[Y_i^k] is
// a little above its mean to the k-th power, (1 - (1 - 1/512)^(k·i))^k,
// because the fill varies from block to block (see blockedRate).
//
// SizeBloom searches for the (blocks, k) pair with the fewest blocks for which
// this is ≤ the target, so the rate at full capacity does not exceed it.

const (
	blockBits  = 512
	blockWords = blockBits / 64
	// maxBlocks is the most blocks a Bloom can index: the block is chosen
	// by multiplying a 32-bit hash (Lemire's range reduction). 2^32 blocks
	// is a 256 GiB filter.
	maxBlocks = 1 << 32
	// maxK bounds probes per key; past it the target rate is out of reach
	// for a blocked filter (one key per block).
	maxK = 32
	// MinFPRate is the smallest false-positive rate SizeBloom accepts.
	MinFPRate = 1e-10
)

// ClassicBits returns the bits a classic (unblocked) Bloom filter needs for n
// keys at false-positive rate p: -n·ln p / (ln 2)².
func ClassicBits(n uint64, p float64) float64 {
	return -float64(n) * math.Log(p) / (math.Ln2 * math.Ln2)
}

// ClassicK returns the optimal number of hash functions for a classic Bloom
// filter at rate p: log2(1/p), rounded.
func ClassicK(p float64) int { return max(1, int(math.Round(-math.Log2(p)))) }

// MinimumBits returns the information-theoretic minimum size of any filter
// for n keys at rate p: n·log2(1/p).
func MinimumBits(n uint64, p float64) float64 { return -float64(n) * math.Log2(p) }

// classicFPRate returns the false-positive rate of a classic Bloom filter of m
// bits with k hash functions holding n keys.
func classicFPRate(m float64, k int, n uint64) float64 {
	return math.Pow(1-math.Exp(-float64(k)*float64(n)/m), float64(k))
}

// Sizing is the geometry of a blocked Bloom filter.
type Sizing struct {
	Capacity uint64  // keys the filter is sized for
	FPRate   float64 // target false-positive rate at Capacity
	Blocks   uint64  // number of 512-bit blocks
	K        int     // probes per key
}

// Bits returns the filter's size in bits.
func (s Sizing) Bits() uint64 { return s.Blocks * blockBits }

// Bytes returns the filter's size in bytes.
func (s Sizing) Bytes() uint64 { return s.Blocks * blockBits / 8 }

// BitsPerKey returns bits per key at capacity.
func (s Sizing) BitsPerKey() float64 { return float64(s.Bits()) / float64(s.Capacity) }

// FPRateAt returns the expected false-positive rate once n distinct keys are
// in the filter.
func (s Sizing) FPRateAt(n uint64) float64 {
	return blockedFPRate(float64(n)/float64(s.Blocks), s.K)
}

// SizeBloom returns the smallest blocked Bloom geometry whose false-positive
// rate with n keys is at most p. It returns ErrInvalidParams for n = 0 or p
// outside [MinFPRate, 1), and ErrTooLarge when the filter would need more
// than 2^32 blocks (256 GiB) or more memory than the platform can address.
func SizeBloom(n uint64, p float64) (Sizing, error) {
	blocks, k, err := sizeBlocked(n, p, blockBits)
	if err != nil {
		return Sizing{}, err
	}
	if err := checkBlocks(blocks); err != nil {
		return Sizing{}, err
	}
	return Sizing{Capacity: n, FPRate: p, Blocks: blocks, K: k}, nil
}

// sizeBlocked returns the fewest blocks of slots slots each, and the k, for
// which n keys have a false-positive rate of at most p when every key sets k
// slots of one block. A slot is a bit in Bloom and a counter in Counting: the
// false-positive math is the same.
func sizeBlocked(n uint64, p float64, slots int) (blocks uint64, k int, err error) {
	if n == 0 {
		return 0, 0, fmt.Errorf("%w: capacity must be > 0", ErrInvalidParams)
	}
	if math.IsNaN(p) || p < MinFPRate || p >= 1 {
		return 0, 0, fmt.Errorf("%w: false-positive rate %v outside [%g, 1)", ErrInvalidParams, p, MinFPRate)
	}
	// Classic size is a lower bound; blocking never needs more than ~2× it at
	// the rates we accept, but search up to 4× before giving up.
	lo := uint64(math.Max(1, math.Floor(ClassicBits(n, p)/float64(slots))))
	rate := func(blocks uint64, k int) float64 {
		return blockedRate(float64(n)/float64(blocks), k, slots)
	}
	// Try the classic k first; every other k then costs one evaluation
	// unless it can match the best so far (ties go to the smaller k).
	first := min(ClassicK(p), maxK)
	for i := range maxK {
		kk := first
		if i > 0 {
			if kk = i; kk >= first {
				kk++
			}
		}
		var hi uint64
		if blocks == 0 {
			for hi = lo; rate(hi, kk) > p; hi = hi*2 + 1 {
				if float64(hi) > 4*float64(lo)+64 {
					hi = 0
					break
				}
			}
			if hi == 0 {
				continue
			}
		} else {
			hi = blocks
			if kk > k {
				hi--
			}
			if hi < lo || rate(hi, kk) > p {
				continue
			}
		}
		l := lo
		for l < hi { // smallest blocks with rate ≤ p, in [l, hi]
			mid := l + (hi-l)/2
			if rate(mid, kk) <= p {
				hi = mid
			} else {
				l = mid + 1
			}
		}
		if blocks == 0 || hi < blocks || hi == blocks && kk < k {
			blocks, k = hi, kk
		}
	}
	if blocks == 0 {
		return 0, 0, fmt.Errorf("%w: no blocked geometry reaches %g", ErrInvalidParams, p)
	}
	return blocks, k, nil
}

func checkBlocks(blocks uint64) error {
	if blocks == 0 {
		return fmt.Errorf("%w: zero blocks", ErrInvalidParams)
	}
	if blocks > maxBlocks || blocks > uint64(math.MaxInt/blockWords) {
		return fmt.Errorf("%w: %d blocks (%d bytes) exceeds the limit of %d blocks", ErrTooLarge, blocks, blocks*64, uint64(maxBlocks))
	}
	return nil
}

// blockedFPRate is the expected false-positive rate of a blocked filter with
// mean λ keys per 512-bit block and k probes per key.
func blockedFPRate(lambda float64, k int) float64 { return blockedRate(lambda, k, blockBits) }

// blockedRate is the expected false-positive rate of a blocked filter with
// mean λ keys per block of slots slots and k probes per key.
//
// A block holding i keys has received t = k·i probes; its fraction of set
// slots Y has mean μ = 1 − (1 − 1/S)^t, and a lookup's k probes all hit set
// slots with probability E[Y^k]. That is not μ^k: a block's fill varies, and
// by Jensen's inequality E[Y^k] > μ^k. Ignoring it understates the rate by
// 1–2 % at 1 % (more with smaller blocks or smaller rates: 7 % at 1e-6). The
// second-order term, from the variance of the number of occupied slots
//
//	Var = S(S−1)(1 − 2/S)^t + S(1 − 1/S)^t − S²(1 − 1/S)^(2t)
//
// gives E[Y^k] ≈ μ^k + k(k−1)/2 · μ^(k−2) · Var/S², within 0.2 % of the exact
// occupancy distribution at the rates SizeBloom accepts (sizing_test.go).
func blockedRate(lambda float64, k, slots int) float64 {
	if !(lambda > 0) {
		return 0
	}
	if lambda > 64*float64(slots) {
		// Blocks this full answer yes to everything: the sum below
		// gives 1 to within rounding, after ~√λ terms (absurdly many for
		// the λ a damaged encoding can claim).
		return 1
	}
	// Sum Pois(i; λ)·f(i) over i within ~12 standard deviations of λ;
	// the tail beyond is < 1e-30.
	sd := math.Sqrt(lambda)
	lo := max(0, int(lambda-12*sd-8))
	hi := int(lambda+12*sd+16) + 1
	s := float64(slots)
	q1, q2 := math.Log1p(-1/s), math.Log1p(-2/s)
	kf := float64(k)
	lg, _ := math.Lgamma(float64(lo + 1))
	pmf := math.Exp(-lambda + float64(lo)*math.Log(lambda) - lg)
	sum := 0.0
	for i := lo; i <= hi; i++ {
		t := float64(k * i)
		e1 := math.Exp(t * q1)
		mu := 1 - e1
		f := mu // k = 1: E[Y] = μ
		if k > 1 {
			e2 := math.Exp(t * q2)
			v := e2 - e1*e1 + (e1-e2)/s // Var/S²
			muk2 := powi(mu, k-2)
			f = muk2*mu*mu + kf*(kf-1)/2*muk2*max(v, 0)
		}
		sum += pmf * f
		pmf *= lambda / float64(i+1)
	}
	return sum
}

// powi returns x^n for n ≥ 0 by repeated squaring.
func powi(x float64, n int) float64 {
	r := 1.0
	for ; n > 0; n >>= 1 {
		if n&1 != 0 {
			r *= x
		}
		x *= x
	}
	return r
}

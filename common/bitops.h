/* SPDX-License-Identifier: MIT */
/* common/bitops.h - bit and alignment helpers on 64-bit words, and plain bitmaps
 * (arrays of uint64_t, bit n in word n/64). None of these take locks. */
#ifndef VGPU_COMMON_BITOPS_H
#define VGPU_COMMON_BITOPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VGPU_BITS_PER_WORD 64
#define VGPU_BIT(n) (1ull << (n))
#define VGPU_BITMAP_WORDS(nbits) (((nbits) + 63) / 64)

/* True if @x is a non-zero power of two. */
static inline bool cmn_is_pow2(uint64_t x) { return x && !(x & (x - 1)); }
/* Round @x up / down to @a, a power of two. */
static inline uint64_t cmn_align_up(uint64_t x, uint64_t a) { return (x + a - 1) & ~(a - 1); }
static inline uint64_t cmn_align_down(uint64_t x, uint64_t a) { return x & ~(a - 1); }
/* True if @x is a multiple of @a, a power of two. */
static inline bool cmn_is_aligned(uint64_t x, uint64_t a) { return !(x & (a - 1)); }
/* Index of the lowest / highest set bit; @x must not be 0. */
static inline unsigned int cmn_ctz(uint64_t x) { return (unsigned int)__builtin_ctzll(x); }
static inline unsigned int cmn_fls(uint64_t x) { return 63u - (unsigned int)__builtin_clzll(x); }
/* floor(log2(x)); @x must not be 0. */
static inline unsigned int cmn_ilog2(uint64_t x) { return cmn_fls(x); }
/* Number of set bits. */
static inline unsigned int cmn_popcount(uint64_t x) { return (unsigned int)__builtin_popcountll(x); }
/* Mask of bits [lo, lo + n) within one word; n in 1..64, lo + n <= 64. */
static inline uint64_t cmn_mask(unsigned int lo, unsigned int n)
{
	return (n >= 64 ? ~0ull : (VGPU_BIT(n) - 1)) << lo;
}
/* Smallest power of two >= @x (x >= 1, x <= 2^63). */
static inline uint64_t cmn_roundup_pow2(uint64_t x)
{
	return x <= 1 ? 1 : VGPU_BIT(cmn_fls(x - 1) + 1);
}

/* Bit @n of the bitmap @map: test, set, clear (not atomic). */
static inline bool cmn_test_bit(const uint64_t *map, uint64_t n)
{
	return map[n / 64] >> (n % 64) & 1;
}
static inline void cmn_set_bit(uint64_t *map, uint64_t n) { map[n / 64] |= VGPU_BIT(n % 64); }
static inline void cmn_clear_bit(uint64_t *map, uint64_t n) { map[n / 64] &= ~VGPU_BIT(n % 64); }

/* Set / clear bits [start, start + n) with whole-word stores for the interior. */
void cmn_bitmap_set(uint64_t *map, uint64_t start, uint64_t n);
void cmn_bitmap_clear(uint64_t *map, uint64_t start, uint64_t n);
/* Number of set bits in [start, start + n). */
uint64_t cmn_bitmap_weight(const uint64_t *map, uint64_t start, uint64_t n);
/* First set / clear bit in [start, nbits), or nbits if none. */
uint64_t cmn_bitmap_next_set(const uint64_t *map, uint64_t nbits, uint64_t start);
uint64_t cmn_bitmap_next_clear(const uint64_t *map, uint64_t nbits, uint64_t start);

#endif

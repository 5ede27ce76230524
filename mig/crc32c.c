// SPDX-License-Identifier: MIT
/* CRC32C (Castagnoli) for the migration stream: every byte of a migration is checksummed
 * once on each side, so this is on the stream's critical path.
 *
 * Two implementations, chosen once at load time (not by -march, so one binary serves every
 * x86-64 CPU): the SSE4.2 crc32 instruction, and slicing-by-8 tables elsewhere. The
 * instruction has a latency of three cycles but takes one per cycle, so a single chain
 * waits on itself two cycles in three: the hardware path runs three chains over three
 * adjacent blocks side by side and joins them with a precomputed "append N zero bytes"
 * operator (CRC is linear: crc(A||B) = zeros(crc(A), |B|) ^ crc0(B)). */
#include <endian.h>
#include <stdint.h>
#include <string.h>

#include "mig/mig.h"
#include "mig/mig_internal.h"

#define POLY		0x82f63b78u	/* Castagnoli, reflected */
#define LONG_BLOCK	8192u		/* three-way blocks for long buffers */
#define SHORT_BLOCK	256u		/* and for what is left */

static uint32_t tab[8][256];		/* slicing-by-8: tab[k][b] = b's CRC then k zero bytes */
static uint32_t zeros_long[4][256];	/* LONG_BLOCK zero bytes appended, per register byte */
static uint32_t zeros_short[4][256];	/* SHORT_BLOCK zero bytes */
static uint32_t zeros_4k[4][256];	/* 4 KiB, and 1 KiB: what mig_crc32c_combine() */
static uint32_t zeros_1k[4][256];	/* joins most, a page and its quarters */
static uint32_t (*impl)(uint32_t crc, const uint8_t *b, size_t len);

static uint64_t load64(const uint8_t *b)
{
	uint64_t v;

	memcpy(&v, b, 8);
	return le64toh(v);
}

/* The register (not inverted) after @len bytes at @b, slicing-by-8. */
static uint32_t crc_sw(uint32_t crc, const uint8_t *b, size_t len)
{
	while (len && ((uintptr_t)b & 7)) {
		crc = (crc >> 8) ^ tab[0][(crc ^ *b++) & 0xff];
		len--;
	}
	for (; len >= 8; len -= 8, b += 8) {
		uint64_t v = load64(b) ^ crc;

		crc = tab[7][v & 0xff] ^ tab[6][(v >> 8) & 0xff] ^ tab[5][(v >> 16) & 0xff] ^
		      tab[4][(v >> 24) & 0xff] ^ tab[3][(v >> 32) & 0xff] ^
		      tab[2][(v >> 40) & 0xff] ^ tab[1][(v >> 48) & 0xff] ^ tab[0][v >> 56];
	}
	while (len--)
		crc = (crc >> 8) ^ tab[0][(crc ^ *b++) & 0xff];
	return crc;
}

/* Register @crc with the zero bytes of table @z appended. */
static uint32_t shift(const uint32_t z[4][256], uint32_t crc)
{
	return z[0][crc & 0xff] ^ z[1][(crc >> 8) & 0xff] ^ z[2][(crc >> 16) & 0xff] ^
	       z[3][crc >> 24];
}

/* The operator "append @n zero bytes" as four byte tables: it is linear, so the image of
 * each of the 32 register bits is enough. */
static void zeros_init(uint32_t z[4][256], size_t n)
{
	static const uint8_t zero[LONG_BLOCK];
	uint32_t bit[32];

	for (int i = 0; i < 32; i++)
		bit[i] = crc_sw(1u << i, zero, n);
	for (int k = 0; k < 4; k++)
		for (uint32_t v = 0; v < 256; v++) {
			uint32_t out = 0;

			for (int j = 0; j < 8; j++)
				if (v >> j & 1)
					out ^= bit[8 * k + j];
			z[k][v] = out;
		}
}

uint32_t mig_crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b)
{
	static const uint8_t zero[1024];
	uint32_t r = crc_a;

	/* crc(A||B) = zeros(crc(A), |B|) ^ crc(B): the inversions before and after cancel. */
	for (; len_b >= 4096; len_b -= 4096)
		r = shift(zeros_4k, r);
	for (; len_b >= 1024; len_b -= 1024)
		r = shift(zeros_1k, r);
	if (len_b)
		r = crc_sw(r, zero, len_b);
	return r ^ crc_b;
}

#if defined(__x86_64__)
/* Three chains over @blk-byte blocks while at least three remain. */
#define CRC_3WAY(blk, z)							\
	while (len >= 3 * (blk)) {						\
		uint64_t c1 = 0, c2 = 0;					\
		const uint8_t *end = b + (blk);					\
										\
		do {								\
			c0 = __builtin_ia32_crc32di(c0, load64(b));		\
			c1 = __builtin_ia32_crc32di(c1, load64(b + (blk)));	\
			c2 = __builtin_ia32_crc32di(c2, load64(b + 2 * (blk)));	\
			b += 8;							\
		} while (b < end);						\
		c0 = shift(z, (uint32_t)c0) ^ (uint32_t)c1;			\
		c0 = shift(z, (uint32_t)c0) ^ (uint32_t)c2;			\
		b += 2 * (blk);							\
		len -= 3 * (blk);						\
	}

/* The register after @len bytes at @b with the crc32 instruction. */
__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t crc, const uint8_t *b, size_t len)
{
	uint64_t c0 = crc;

	while (len && ((uintptr_t)b & 7)) {
		c0 = __builtin_ia32_crc32qi((uint32_t)c0, *b++);
		len--;
	}
	CRC_3WAY(LONG_BLOCK, zeros_long)
	CRC_3WAY(SHORT_BLOCK, zeros_short)
	for (; len >= 8; len -= 8, b += 8)
		c0 = __builtin_ia32_crc32di(c0, load64(b));
	while (len--)
		c0 = __builtin_ia32_crc32qi((uint32_t)c0, *b++);
	return (uint32_t)c0;
}
#endif

/* Tables and the implementation, once (constructors run before any thread). */
__attribute__((constructor)) static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (POLY & (0u - (c & 1)));
		tab[0][i] = c;
	}
	for (int k = 1; k < 8; k++)
		for (uint32_t i = 0; i < 256; i++)
			tab[k][i] = (tab[k - 1][i] >> 8) ^ tab[0][tab[k - 1][i] & 0xff];
	zeros_init(zeros_long, LONG_BLOCK);
	zeros_init(zeros_short, SHORT_BLOCK);
	zeros_init(zeros_4k, 4096);
	zeros_init(zeros_1k, 1024);
	impl = crc_sw;
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("sse4.2"))
		impl = crc_hw;
#endif
}

uint32_t mig_crc32c(uint32_t crc, const void *p, size_t len)
{
	return ~impl(~crc, p, len);
}

uint32_t mig_crc32c_sw(uint32_t crc, const void *p, size_t len)
{
	return ~crc_sw(~crc, p, len);
}

bool mig_crc32c_hw(uint32_t crc, const void *p, size_t len, uint32_t *out)
{
#if defined(__x86_64__)
	if (impl == crc_hw) {
		*out = ~crc_hw(~crc, p, len);
		return true;
	}
#endif
	(void)crc;
	(void)p;
	(void)len;
	(void)out;
	return false;
}

const char *mig_crc32c_impl(void)
{
	return impl == crc_sw ? "table" : "sse4.2";
}

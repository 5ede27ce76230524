// SPDX-License-Identifier: MIT
/* Shadow bitmap: an independent record of what every backend handed out, so each
 * allocation can be checked (in range, aligned, contiguous when asked, never overlapping
 * live memory) and each free can be checked to release exactly what was allocated. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bitops.h"
#include "pb.h"

int pb_shadow_init(struct pb_shadow *s, uint64_t nr_frames)
{
	memset(s, 0, sizeof(*s));
	s->map = calloc(VGPU_BITMAP_WORDS(nr_frames), sizeof(uint64_t));
	if (!s->map)
		return -ENOMEM;
	s->nr_frames = nr_frames;
	return 0;
}

void pb_shadow_release(struct pb_shadow *s)
{
	free(s->map);
	s->map = NULL;
}

void pb_shadow_reset(struct pb_shadow *s)
{
	memset(s->map, 0, VGPU_BITMAP_WORDS(s->nr_frames) * sizeof(uint64_t));
	s->used_frames = 0;
	s->violations = 0;
	s->first_violation[0] = '\0';
}

/* Count a violation; only the first one is described (the rest are usually its echo). */
__attribute__((format(printf, 2, 3)))
static bool shadow_violation(struct pb_shadow *s, const char *fmt, ...)
{
	va_list ap;

	if (!s->violations++) {
		va_start(ap, fmt);
		vsnprintf(s->first_violation, sizeof(s->first_violation), fmt, ap);
		va_end(ap);
	}
	return false;
}

/* Range and alignment of one page; the frames it covers on success. */
static bool shadow_page_ok(struct pb_shadow *s, uint64_t addr, uint64_t page_size)
{
	if (addr % page_size)
		return shadow_violation(s, "page 0x%llx not aligned to 0x%llx",
					(unsigned long long)addr, (unsigned long long)page_size);
	if (addr / PB_FRAME_SIZE + page_size / PB_FRAME_SIZE > s->nr_frames)
		return shadow_violation(s, "page 0x%llx beyond the device",
					(unsigned long long)addr);
	return true;
}

bool pb_shadow_alloc(struct pb_shadow *s, const struct pb_req *r, const uint64_t *pages)
{
	uint64_t pf = r->page_size / PB_FRAME_SIZE;
	uint32_t i;

	for (i = 0; i < r->count; i++) {
		if (!shadow_page_ok(s, pages[i], r->page_size))
			goto undo;
		if (r->contig && pages[i] != pages[0] + i * r->page_size) {
			shadow_violation(s, "contiguous request: page %u at 0x%llx, want 0x%llx", i,
					 (unsigned long long)pages[i],
					 (unsigned long long)(pages[0] + i * r->page_size));
			goto undo;
		}
		/* Catches overlap with live memory and duplicates within this request. */
		if (cmn_bitmap_weight(s->map, pages[i] / PB_FRAME_SIZE, pf)) {
			shadow_violation(s, "page 0x%llx overlaps live memory",
					 (unsigned long long)pages[i]);
			goto undo;
		}
		cmn_bitmap_set(s->map, pages[i] / PB_FRAME_SIZE, pf);
	}
	s->used_frames += r->count * pf;
	return true;
undo:
	/* Leave the shadow as it was: the pages recorded so far were this request's. */
	while (i--)
		cmn_bitmap_clear(s->map, pages[i] / PB_FRAME_SIZE, pf);
	return false;
}

bool pb_shadow_free(struct pb_shadow *s, const struct pb_req *r, const uint64_t *pages)
{
	uint64_t pf = r->page_size / PB_FRAME_SIZE;

	for (uint32_t i = 0; i < r->count; i++) {
		if (!shadow_page_ok(s, pages[i], r->page_size))
			return false;
		if (cmn_bitmap_weight(s->map, pages[i] / PB_FRAME_SIZE, pf) != pf)
			return shadow_violation(s, "freeing 0x%llx, which is not allocated",
						(unsigned long long)pages[i]);
	}
	for (uint32_t i = 0; i < r->count; i++)
		cmn_bitmap_clear(s->map, pages[i] / PB_FRAME_SIZE, pf);
	s->used_frames -= r->count * pf;
	return true;
}

uint64_t pb_shadow_free_2m(const struct pb_shadow *s)
{
	uint64_t n = 0;

	/* 32 frames = half a word: a group is free if its half-word is zero. */
	for (uint64_t w = 0; w < VGPU_BITMAP_WORDS(s->nr_frames); w++)
		n += !(uint32_t)s->map[w] + !(uint32_t)(s->map[w] >> 32);
	return n;
}

/* Longest free run of 2 MiB-aligned groups, in groups. */
static uint64_t shadow_longest_2m_run(const struct pb_shadow *s)
{
	uint64_t best = 0, run = 0;

	for (uint64_t g = 0; g < s->nr_frames / PB_FRAMES_PER_2M; g++) {
		uint64_t w = s->map[g / 2] >> (g % 2 * 32);

		run = (uint32_t)w ? 0 : run + 1;
		best = run > best ? run : best;
	}
	return best;
}

bool pb_shadow_fits(const struct pb_shadow *s, const struct pb_req *r)
{
	uint64_t free_frames = s->nr_frames - s->used_frames;

	if (r->page_size == PB_FRAME_SIZE && !r->contig)
		return free_frames >= r->count;
	if (!r->contig)
		return pb_shadow_free_2m(s) >= r->count;
	return shadow_longest_2m_run(s) >= r->count;
}

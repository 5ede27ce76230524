/* SPDX-License-Identifier: MIT */
/* Helpers for the gpu_model tests: a device with a slice per function, a bump allocator
 * over each slice, a page-table builder and channels whose GPFIFO, pushbuffer and USERD
 * live in the function's VRAM. The tests act as the GSP (gpu_priv_*) and as the guest. */
#ifndef VGPU_TESTS_GPU_TEST_H
#define VGPU_TESTS_GPU_TEST_H

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/bitops.h"
#include "common/clock.h"
#include "common/compiler.h"
#include "gpu_model/gpu.h"

#define T_TABLES	(2ull << 20)		/* first 2 MiB of a slice: page tables */
#define T_VA_BASE	0x100000000ull		/* VA = T_VA_BASE + VF-physical address */
#define T_PB_BYTES	(256u << 10)
/* Only guards a hang: every wait ends on an event, and a loaded machine (TSan, other jobs
 * on two CPUs) can take seconds to get there. */
#define T_TIMEOUT	(60 * VGPU_NSEC_PER_SEC)

struct tgpu {
	struct gpu *g;
	struct gpu_priv *p;
	unsigned int nr_fns;
	uint64_t slice;
	uint64_t next_table[GPU_MAX_FNS];
	uint64_t next_data[GPU_MAX_FNS];
	uint64_t pdb[GPU_MAX_FNS];
};

struct tchan {
	unsigned int fn, chid, rl;
	uint32_t entries, put;
	uint64_t *gp;			/* host view of the GP ring */
	uint64_t gp_va;
	struct vgpu_userd *userd;
	uint64_t userd_pa;
	uint32_t *pb;			/* host view of the pushbuffer */
	uint64_t pb_va;
	uint32_t pb_off;		/* dwords used */
	uint32_t seg_start;
};

static inline void *tgpu_ptr(struct tgpu *t, unsigned int fn, uint64_t pa, uint64_t len)
{
	void *p = gpu_fn_vram_ptr(t->g, fn, pa, len);

	assert_non_null(p);
	return p;
}

/* A fresh 4 KiB table in @fn's table area. */
static inline uint64_t tgpu_table(struct tgpu *t, unsigned int fn)
{
	uint64_t pa = t->next_table[fn];

	t->next_table[fn] += VGPU_GMMU_TABLE_BYTES;
	assert_true(t->next_table[fn] <= T_TABLES);
	memset(tgpu_ptr(t, fn, pa, 4096), 0, 4096);
	return pa;
}

/* Data pages: always a fresh 2 MiB-aligned region, so page sizes never share a PDE. */
static inline uint64_t tgpu_alloc(struct tgpu *t, unsigned int fn, uint64_t size)
{
	uint64_t pa = t->next_data[fn];

	t->next_data[fn] += cmn_align_up(size, VGPU_GMMU_PAGE_2M);
	assert_true(t->next_data[fn] <= t->slice);
	return pa;
}

static inline uint64_t *tgpu_entry(struct tgpu *t, unsigned int fn, uint64_t table, unsigned int idx)
{
	return (uint64_t *)tgpu_ptr(t, fn, table + idx * 8ull, 8);
}

/* Table at the next level under *pde, creating it (64K tables when @big). */
static inline uint64_t tgpu_next(struct tgpu *t, unsigned int fn, uint64_t table, unsigned int idx,
				 bool big)
{
	uint64_t *e = tgpu_entry(t, fn, table, idx);

	if (!(*e & VGPU_GMMU_VALID)) {
		uint64_t nt = tgpu_table(t, fn);

		*e = big ? vgpu_gmmu_pde64k(nt) : vgpu_gmmu_pde(nt);
	}
	return *e & VGPU_GMMU_ADDR_MASK;
}

/* Pointer to the PTE slot mapping @va with @page_size in @fn's address space. */
static inline uint64_t *tgpu_pte(struct tgpu *t, unsigned int fn, uint64_t va, uint64_t page_size)
{
	uint64_t l1 = tgpu_next(t, fn, t->pdb[fn], (va >> VGPU_GMMU_L0_SHIFT) & 511, false);
	uint64_t l2 = tgpu_next(t, fn, l1, (va >> VGPU_GMMU_L1_SHIFT) & 511, false);
	unsigned int i2 = (va >> VGPU_GMMU_L2_SHIFT) & 511;

	if (page_size == VGPU_GMMU_PAGE_2M)
		return tgpu_entry(t, fn, l2, i2);
	bool big = page_size == VGPU_GMMU_PAGE_64K;
	uint64_t l3 = tgpu_next(t, fn, l2, i2, big);

	return big ? tgpu_entry(t, fn, l3, (va >> 16) & 31) : tgpu_entry(t, fn, l3, (va >> 12) & 511);
}

/* Map [va, va+size) to @addr with @page_size pages and PTE @flags. */
static inline void tgpu_map(struct tgpu *t, unsigned int fn, uint64_t va, uint64_t addr,
			    uint64_t size, uint64_t page_size, uint64_t flags)
{
	for (uint64_t off = 0; off < size; off += page_size) {
		uint64_t *pte = tgpu_pte(t, fn, va + off, page_size);

		*pte = page_size == VGPU_GMMU_PAGE_2M ? vgpu_gmmu_pte2m(addr + off, flags)
						      : vgpu_gmmu_pte(addr + off, flags);
	}
}

/* Allocate and map @size bytes of VRAM at VA = T_VA_BASE + pa; returns the VA. */
static inline uint64_t tgpu_vmem(struct tgpu *t, unsigned int fn, uint64_t size, uint64_t page_size)
{
	uint64_t pa = tgpu_alloc(t, fn, size);

	tgpu_map(t, fn, T_VA_BASE + pa, pa, cmn_align_up(size, page_size), page_size, 0);
	return T_VA_BASE + pa;
}

/* Host pointer of a VA made by tgpu_vmem(). */
static inline void *tgpu_va(struct tgpu *t, unsigned int fn, uint64_t va, uint64_t len)
{
	return tgpu_ptr(t, fn, va - T_VA_BASE, len);
}

/* A device as @cfg says, each function owning a @slice_mib slice (PF included); the VRAM
 * size is set here. */
static inline struct tgpu *tgpu_new_cfg(struct gpu_config cfg, uint64_t slice_mib)
{
	struct tgpu *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	cfg.vram_size = (cfg.nr_vfs + 1) * slice_mib * VGPU_MiB;
	assert_int_equal(gpu_create(&cfg, &t->g), 0);
	t->p = gpu_priv_get(t->g);
	t->nr_fns = cfg.nr_vfs + 1;
	t->slice = slice_mib * VGPU_MiB;
	for (unsigned int fn = 0; fn < t->nr_fns; fn++) {
		assert_int_equal(gpu_priv_partition_set(t->p, fn, fn * t->slice, t->slice), 0);
		t->next_data[fn] = T_TABLES;
		t->pdb[fn] = tgpu_table(t, fn);
	}
	return t;
}

/* Device with @nr_vfs VFs, each function owning a @slice_mib slice (PF included);
 * @scan_ns: GP_PUT scan period (0 = default). */
static inline struct tgpu *tgpu_new_scan(unsigned int nr_vfs, unsigned int engines,
					 uint64_t slice_mib, uint64_t scan_ns)
{
	struct gpu_config cfg = { .nr_vfs = nr_vfs, .nr_engines = engines, .scan_period_ns = scan_ns };

	return tgpu_new_cfg(cfg, slice_mib);
}

static inline struct tgpu *tgpu_new(unsigned int nr_vfs, unsigned int engines, uint64_t slice_mib)
{
	return tgpu_new_scan(nr_vfs, engines, slice_mib, 0);
}

static inline void tgpu_free(struct tgpu *t)
{
	gpu_destroy(t->g);
	free(t);
}

/* Channel @chid of @fn on runlist @rl with @entries GP slots; allocated, enabled, resident. */
static inline void tchan_init_flags(struct tgpu *t, struct tchan *c, unsigned int fn, unsigned int chid,
				    unsigned int rl, uint32_t entries, uint64_t flags, bool resident)
{
	uint64_t area = tgpu_alloc(t, fn, entries * 8ull + T_PB_BYTES + 8192);
	struct gpu_priv_chan cfg;

	memset(c, 0, sizeof(*c));
	c->fn = fn;
	c->chid = chid;
	c->rl = rl;
	c->entries = entries;
	c->userd_pa = area;
	c->gp_va = T_VA_BASE + area + 4096;
	c->pb_va = cmn_align_up(c->gp_va + entries * 8ull, 4096);
	tgpu_map(t, fn, T_VA_BASE + area, area, VGPU_GMMU_PAGE_2M *
		 ((entries * 8ull + T_PB_BYTES + 8192 + VGPU_GMMU_PAGE_2M - 1) / VGPU_GMMU_PAGE_2M),
		 VGPU_GMMU_PAGE_2M, 0);
	c->userd = tgpu_ptr(t, fn, area, sizeof(*c->userd));
	memset(c->userd, 0, sizeof(*c->userd));
	c->gp = tgpu_va(t, fn, c->gp_va, entries * 8ull);
	c->pb = tgpu_va(t, fn, c->pb_va, T_PB_BYTES);
	cfg = (struct gpu_priv_chan){
		.flags = flags, .runlist = rl, .pdb = t->pdb[fn], .gpfifo_va = c->gp_va,
		.gpfifo_entries = entries, .userd_aper = VGPU_APER_VRAM, .userd_addr = area,
	};
	assert_int_equal(gpu_priv_chan_alloc(t->p, fn, chid, &cfg), 0);
	assert_int_equal(gpu_priv_chan_enable(t->p, fn, chid, true), 0);
	if (resident) {
		uint64_t rlmask = gpu_priv_shared(t->p)->fns[fn].runlist[rl];

		assert_int_equal(gpu_priv_runlist_set(t->p, fn, rl, rlmask | VGPU_BIT(chid)), 0);
	}
}

static inline void tchan_init(struct tgpu *t, struct tchan *c, unsigned int fn, unsigned int chid,
			      unsigned int rl, uint32_t entries)
{
	tchan_init_flags(t, c, fn, chid, rl, entries, 0, true);
}

/* Append one method to the pushbuffer (the current segment). */
static inline void tchan_method(struct tchan *c, uint32_t id, const uint32_t *args, uint32_t n)
{
	if (c->pb_off + 1 + n > T_PB_BYTES / 4)
		c->pb_off = c->seg_start = 0;	/* wrap: tests keep far less than this in flight */
	c->pb[c->pb_off++] = VGPU_MTHD(id, n);
	for (uint32_t i = 0; i < n; i++)
		c->pb[c->pb_off++] = args[i];
}

#define TM(c, id, ...) do {							\
		const uint32_t a_[] = { __VA_ARGS__ };				\
		tchan_method((c), (id), a_, VGPU_ARRAY_SIZE(a_));		\
	} while (0)

static inline uint32_t lo32(uint64_t v) { return (uint32_t)v; }
static inline uint32_t hi32(uint64_t v) { return (uint32_t)(v >> 32); }

/* Close the current segment into a GP entry (no doorbell yet). */
static inline void tchan_gp(struct tchan *c)
{
	uint32_t n = c->pb_off - c->seg_start;

	c->gp[c->put] = vgpu_gp_entry(c->pb_va + c->seg_start * 4ull, n);
	c->put = (c->put + 1) % c->entries;
	c->seg_start = c->pb_off;
}

/* Raw GP entry. */
static inline void tchan_gp_raw(struct tchan *c, uint64_t e)
{
	c->gp[c->put] = e;
	c->put = (c->put + 1) % c->entries;
}

/* Write USERD's inline copy (vgpu/gpfifo.h, ABI 2.6) of the @ndw dwords @dw with GP entry
 * @e under inl_ctl @ctl, in the driver's order: inl_ctl cleared first, set last. */
static inline void tchan_inline_copy(struct tchan *c, const uint32_t *dw, uint32_t ndw,
				     uint64_t e, uint32_t ctl)
{
	struct vgpu_userd *u = c->userd;

	__atomic_store_n(&u->inl_ctl, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&u->inl_entry, e, __ATOMIC_RELEASE);
	for (uint32_t i = 0; i < ndw; i++)
		__atomic_store_n(&u->inl_dw[i], dw[i], __ATOMIC_RELEASE);
	__atomic_store_n(&u->inl_ctl, ctl, __ATOMIC_RELEASE);
}

/* Publish GP_PUT and ring. */
static inline void tchan_kick(struct tgpu *t, struct tchan *c)
{
	__atomic_store_n(&c->userd->gp_put, c->put, __ATOMIC_RELEASE);
	gpu_doorbell_ring(t->g, c->fn, vgpu_token(c->rl, c->chid));
}

static inline uint32_t tchan_get(struct tchan *c)
{
	return __atomic_load_n(&c->userd->gp_get, __ATOMIC_ACQUIRE);
}

static inline uint32_t tchan_err(struct tchan *c)
{
	return __atomic_load_n(&c->userd->error, __ATOMIC_ACQUIRE);
}

/* Wait until GP_GET reaches put or the channel errors. Returns the error (0 = done);
 * -ETIMEDOUT if neither happened. */
static inline int tchan_wait(struct tchan *c)
{
	uint64_t dl = cmn_deadline_ns(T_TIMEOUT);

	while (!cmn_deadline_passed(dl)) {
		if (tchan_err(c))
			return (int)tchan_err(c);
		if (tchan_get(c) == c->put)
			return 0;
		cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
	}
	return -ETIMEDOUT;
}

/* Acknowledge @bits of function @fn, waiting for them to be raised: the model raises the
 * interrupt after it writes the notifier, so a test that saw the notifier may be early.
 * Returns the bits acknowledged (0 if none was raised in time). */
static inline uint32_t tgpu_wait_intr(struct tgpu *t, unsigned int fn, uint32_t bits)
{
	uint64_t dl = cmn_deadline_ns(T_TIMEOUT);
	uint32_t got;

	while (!(got = gpu_intr_ack(t->g, fn, bits)) && !cmn_deadline_passed(dl))
		cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
	return got;
}

/* @fn's doorbell counters now. */
static inline struct gpu_db_stats tgpu_db_stats(struct tgpu *t, unsigned int fn)
{
	struct gpu_db_stats s;

	gpu_db_stats(t->g, fn, &s);
	return s;
}

#define TGPU_DB(field) offsetof(struct gpu_db_stats, field)

/* Wait until @fn's doorbell counter at @off (TGPU_DB(field)) reaches @want; its value. */
static inline uint64_t tgpu_wait_db(struct tgpu *t, unsigned int fn, size_t off, uint64_t want)
{
	uint64_t dl = cmn_deadline_ns(T_TIMEOUT), v;
	struct gpu_db_stats s;

	for (;;) {
		s = tgpu_db_stats(t, fn);
		memcpy(&v, (char *)&s + off, sizeof(v));
		if (v >= want || cmn_deadline_passed(dl))
			return v;
		cmn_sleep_ns(10 * VGPU_NSEC_PER_USEC);
	}
}

/* Wait for the channel's state to become @st. */
static inline int tchan_wait_state(struct tgpu *t, struct tchan *c, enum gpu_chan_state st)
{
	uint64_t dl = cmn_deadline_ns(T_TIMEOUT);
	struct gpu_chan_status s;

	while (!cmn_deadline_passed(dl)) {
		assert_int_equal(gpu_chan_status(t->g, c->fn, c->chid, &s), 0);
		if (s.state == st)
			return 0;
		cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
	}
	return -ETIMEDOUT;
}

#endif

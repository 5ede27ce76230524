// SPDX-License-Identifier: MIT
/* Thread-safe translation (also run under ThreadSanitizer): device threads translate and
 * DMA while the host maps and unmaps. After an unmap completes (strict) or its flush
 * queue drained (lazy), the host poisons the page it unmapped; a device read that ever
 * returns poison used a stale translation after the unmap had completed. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include "iommu_test.h"

#define NSLOTS	 32
#define NPAGES	 96
#define BASE	 (1ull << 36)
#define POISON	 0xdeaddeaddeaddeadull
#define HOST_OPS 2000

struct mt {
	struct iommu *mmu;
	struct iommu_domain *d;		/* what the devices use */
	struct iommu_domain *host_d;	/* what the host maps into (d, or d's stage-2) */
	uint64_t host_base;		/* host-side address of slot 0 */
	struct iommu_memobj *mo;
	uint8_t *mem;
	atomic_bool stop;
	atomic_ulong reads_ok, bad;
};

struct dev {
	struct mt *mt;
	unsigned int rid, rid2;
	bool raw;		/* rid2: iommu_translate + own load instead of the DMA helper */
	bool polls_ats;		/* rid2 has polled ATS */
	uint64_t seed;
};

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static bool good_stamp(uint64_t v)
{
	return v >> 32 == 0x5a5a5a5a;
}

/* One access through @rid (or raw translate when @raw). */
static void dev_access(struct dev *dv, unsigned int rid, bool raw)
{
	struct mt *mt = dv->mt;
	uint64_t iova = BASE + (rnd(&dv->seed) % NSLOTS) * PG + 8 * (rnd(&dv->seed) % 4);
	uint64_t v = 0;
	int ret;

	if (raw) {
		struct iommu_xlate x;

		iommu_access_begin();
		ret = iommu_translate(mt->d, iova, 8, IOMMU_READ, &x);
		if (!ret)
			memcpy(&v, x.host, 8);
		iommu_access_end();
	} else {
		ret = iommu_dma_read(mt->mmu, rid, iova, &v, 8);
	}
	if (!ret) {
		atomic_fetch_add_explicit(&mt->reads_ok, 1, memory_order_relaxed);
		if (!good_stamp(v))
			atomic_fetch_add(&mt->bad, 1);
	}
}

/* Two device threads (the machine has two CPUs and the host needs one too): each
 * serves two functions in turn. */
static void *dev_thread(void *arg)
{
	struct dev *dv = arg;
	struct mt *mt = dv->mt;

	while (!atomic_load_explicit(&mt->stop, memory_order_relaxed)) {
		dev_access(dv, dv->rid, false);
		dev_access(dv, dv->rid2, dv->raw);
		if (dv->polls_ats)
			iommu_ats_poll(mt->mmu, dv->rid2);
	}
	return NULL;
}

static void stamp(struct mt *mt, unsigned int page, uint64_t n)
{
	uint64_t v = 0x5a5a5a5a00000000ull | n;

	for (unsigned int k = 0; k < 4; k++)
		memcpy(mt->mem + page * PG + 8 * k, &v, 8);
}

static void poison(struct mt *mt, unsigned int page)
{
	uint64_t v = POISON;

	for (unsigned int k = 0; k < 4; k++)
		memcpy(mt->mem + page * PG + 8 * k, &v, 8);
}

static void host_run(struct mt *mt, bool lazy, uint64_t seed)
{
	int slot_page[NSLOTS];
	bool page_busy[NPAGES] = { false };
	unsigned int pending[NPAGES], npending = 0;

	for (unsigned int s = 0; s < NSLOTS; s++)
		slot_page[s] = -1;
	for (uint64_t op = 0; op < HOST_OPS; op++) {
		unsigned int s = (unsigned int)(rnd(&seed) % NSLOTS);
		uint64_t iova = mt->host_base + s * PG;

		if (slot_page[s] >= 0) {
			assert_int_equal(iommu_unmap(mt->host_d, iova, PG, NULL), 0);
			if (lazy) {
				pending[npending++] = (unsigned int)slot_page[s];
			} else {
				poison(mt, (unsigned int)slot_page[s]);
				page_busy[slot_page[s]] = false;
			}
			slot_page[s] = -1;
		} else {
			unsigned int p = (unsigned int)(rnd(&seed) % NPAGES);

			while (page_busy[p])
				p = (p + 1) % NPAGES;
			page_busy[p] = true;
			stamp(mt, p, op);
			assert_int_equal(iommu_map(mt->host_d, mt->mo, p * PG, PG, IOMMU_READ,
						   IOMMU_MAP_FIXED_IOVA, &iova), 0);
			slot_page[s] = (int)p;
		}
		if (lazy && (npending >= 16 || rnd(&seed) % 64 == 0)) {
			iommu_domain_flush_queue(mt->host_d);
			for (unsigned int i = 0; i < npending; i++) {
				poison(mt, pending[i]);
				page_busy[pending[i]] = false;
			}
			npending = 0;
		}
	}
}

#define IPA_T (1ull << 30)	/* stage-1 tables, in the function's stage-2 */
#define IPA_D (2ull << 30)	/* data slots, mapped and unmapped by the host */

/* Nested: a fixed stage-1 maps slot s to IPA_D + s pages; the host maps and unmaps the
 * stage-2 behind it, so every staleness check goes through stage-2 invalidation reaching
 * the nested domain's cached translations. */
static void nested_setup(struct mt *mt)
{
	struct iommu_memobj *tmo = t_memobj(mt->mmu, 8 * PG, 0);
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_NESTED, .s1_root = IPA_T };
	struct t_s1 tbl;

	mt->host_d = t_paging(mt->mmu, IOMMU_DOMAIN_NEST_PARENT);
	t_map_fixed(mt->host_d, tmo, 0, 8 * PG, IOMMU_READ, IPA_T);
	t_s1_init(&tbl, iommu_memobj_base(tmo), IPA_T, IPA_T);
	for (unsigned int s = 0; s < NSLOTS; s++)
		t_s1_map(&tbl, BASE + s * PG, IPA_D + s * PG, PG, IOMMU_READ | IOMMU_WRITE);
	o.parent = mt->host_d;
	assert_int_equal(iommu_domain_alloc(mt->mmu, &o, &mt->d), 0);
	mt->host_base = IPA_D;
}

enum mt_mode { MT_STRICT, MT_LAZY, MT_NESTED };

static void test_mt(void **state)
{
	const enum mt_mode mode = (enum mt_mode)(uintptr_t)*state;
	struct mt mt = { 0 };
	/* rid 1: plain; rid 2: ATS answered inline; rid 3: ATS polled by its device. */
	struct dev devs[2] = {
		{ &mt, 1, 0, true, false, 0x1111 },
		{ &mt, 2, 3, false, true, 0x3333 },
	};
	pthread_t th[2];

	mt.mmu = t_iommu();
	mt.mo = t_memobj(mt.mmu, NPAGES * PG, 0);
	mt.mem = iommu_memobj_base(mt.mo);
	for (unsigned int p = 0; p < NPAGES; p++)
		poison(&mt, p);
	if (mode == MT_NESTED) {
		nested_setup(&mt);
	} else {
		mt.d = mt.host_d = t_paging(mt.mmu, mode == MT_LAZY ? IOMMU_DOMAIN_LAZY : 0);
		mt.host_base = BASE;
	}
	for (unsigned int r = 1; r <= 3; r++)
		assert_int_equal(iommu_attach(mt.mmu, r, mt.d), 0);
	assert_int_equal(iommu_ats_enable(mt.mmu, 2, 0), 0);
	assert_int_equal(iommu_ats_enable(mt.mmu, 3, IOMMU_ATS_POLLED), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, dev_thread, &devs[i]), 0);
	host_run(&mt, mode == MT_LAZY, 0xabcdef + mode);
	atomic_store(&mt.stop, true);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(atomic_load(&mt.bad), 0);
	assert_true(atomic_load(&mt.reads_ok) > 0);
	iommu_destroy(mt.mmu);
}

/* ---- racing destroys through the command interface --------------------------------- */

#define DESTROY_ROUNDS 2000

struct destroy_race {
	struct iommu *mmu;
	pthread_barrier_t go, done;
	atomic_uint arrived;		/* the two destroyers meet here, spinning, each round */
	uint32_t did, moid;		/* this round's objects */
	int ret[2][2];			/* [thread][domain, memobj] */
};

static int cmd_destroy(struct iommu *mmu, uint32_t obj, uint32_t id)
{
	struct iommu_cmd_destroy c = { sizeof(c), obj, id, 0 };

	return iommu_cmd(mmu, IOMMU_CMD_DESTROY, &c);
}

static void *destroy_thread(void *arg)
{
	struct destroy_race *r = arg;
	static atomic_uint next;
	unsigned int me = atomic_fetch_add(&next, 1) & 1;

	for (unsigned int i = 0; i < DESTROY_ROUNDS; i++) {
		pthread_barrier_wait(&r->go);
		/* Waking from the barrier takes far longer than a destroy: meet again,
		 * spinning, so that both destroys start together. */
		atomic_fetch_add(&r->arrived, 1);
		while (atomic_load(&r->arrived) < 2 * (i + 1))
			;
		r->ret[me][0] = cmd_destroy(r->mmu, IOMMU_OBJ_DOMAIN, r->did);
		r->ret[me][1] = cmd_destroy(r->mmu, IOMMU_OBJ_MEMOBJ, r->moid);
		pthread_barrier_wait(&r->done);
	}
	return NULL;
}

/* Two destroys of one id: exactly one frees the object, the other finds nothing. */
static void test_destroy_race(void **state)
{
	struct destroy_race r = { 0 };
	pthread_t th[2];

	(void)state;
	r.mmu = t_iommu();
	pthread_barrier_init(&r.go, NULL, 3);
	pthread_barrier_init(&r.done, NULL, 3);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, destroy_thread, &r), 0);
	for (int i = 0; i < DESTROY_ROUNDS; i++) {
		r.did = iommu_domain_id(t_paging(r.mmu, 0));
		r.moid = iommu_memobj_id(t_memobj(r.mmu, PG, 0));
		pthread_barrier_wait(&r.go);
		pthread_barrier_wait(&r.done);
		for (int k = 0; k < 2; k++) {
			int a = r.ret[0][k], b = r.ret[1][k];

			assert_true((a == 0 && b == -ENOENT) || (a == -ENOENT && b == 0));
		}
	}
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&r.go);
	pthread_barrier_destroy(&r.done);
	iommu_destroy(r.mmu);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		{ "device threads vs strict unmap: never poison", test_mt, NULL, NULL,
		  (void *)MT_STRICT },
		{ "device threads vs lazy unmap + drain: never poison", test_mt, NULL, NULL,
		  (void *)MT_LAZY },
		{ "nested: device threads vs stage-2 unmap: never poison", test_mt, NULL, NULL,
		  (void *)MT_NESTED },
		{ "two destroys of one id: one frees, the other gets ENOENT", test_destroy_race,
		  NULL, NULL, NULL },
	};

	return cmocka_run_group_tests_name("iommu_mt", tests, NULL, NULL);
}

// SPDX-License-Identifier: MIT
/* No stale data between owners of device memory: pages handed out by the pool read as
 * zeros whatever an earlier owner (or the memory's life before the pool) left there, and
 * a migration of never-touched pages puts zeros on the device, on every backend. Each
 * case starts from dirty device memory, since a fresh pool is zeroed by the kernel and
 * would hide a missing scrub. */
#include "tdev.h"

#define POOL		(4 * M2)
#define POOL_PAGES	(POOL / PG)
#define GARBAGE		0xa5

/* True if every byte of [p, p+len) is zero; fails naming the first that is not. */
static void assert_zeros(const void *p, size_t len, const char *what)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < len; i++) {
		if (b[i])
			fail_msg("%s: byte %zu is %#x, want 0", what, i, b[i]);
	}
}

/* Device memory as a recycled VRAM slice: 2 MiB aligned and full of an earlier user's
 * bytes. */
static void *dirty_vram(void)
{
	void *v = tbuf_new(POOL, false);

	memset(v, GARBAGE, POOL);
	return v;
}

/* Owner A fills every page it gets and frees it; owner B then gets the same pages (one
 * 2 MiB chunk, then single pages) and reads every byte. */
static void test_realloc_across_owners(void **state)
{
	static uint64_t pages[POOL_PAGES];
	struct hmm_devmem *dm;
	struct hmm_devmem_stats st;
	static int owner_a, owner_b;

	(void)state;
	assert_int_equal(hmm_devmem_create(&(struct hmm_devmem_desc){ .owner = &owner_a,
					   .size = POOL }, &dm), 0);
	assert_int_equal(hmm_devmem_alloc(dm, POOL_PAGES, false, pages), 0);
	for (size_t i = 0; i < POOL_PAGES; i++)
		memset(hmm_devmem_page_ptr(dm, pages[i]), 0x5a, PG);
	hmm_devmem_free(dm, pages, POOL_PAGES);
	assert_int_equal(hmm_devmem_destroy(dm), 0);

	/* a pool over memory someone used before (the same slice given to another VF) */
	void *vram = dirty_vram();

	assert_int_equal(hmm_devmem_create(&(struct hmm_devmem_desc){ .owner = &owner_b,
					   .base = vram, .size = POOL }, &dm), 0);
	assert_int_equal(hmm_devmem_alloc(dm, HMM_BLOCK_PAGES, true, pages), 0);
	assert_int_equal(hmm_devmem_alloc(dm, POOL_PAGES - HMM_BLOCK_PAGES, false,
					  pages + HMM_BLOCK_PAGES), 0);
	for (size_t i = 0; i < POOL_PAGES; i++)
		assert_zeros(hmm_devmem_page_ptr(dm, pages[i]), PG, "first owner's page");
	/* the first owner writes everything and frees it; the next one reads every byte */
	for (size_t i = 0; i < POOL_PAGES; i++)
		memset(hmm_devmem_page_ptr(dm, pages[i]), 0x3c, PG);
	hmm_devmem_free(dm, pages, POOL_PAGES);
	assert_int_equal(hmm_devmem_alloc(dm, POOL_PAGES, false, pages), 0);
	for (size_t i = 0; i < POOL_PAGES; i++)
		assert_zeros(hmm_devmem_page_ptr(dm, pages[i]), PG, "next owner's page");
	hmm_devmem_get_stats(dm, &st);
	assert_int_equal(st.scrubbed_pages, 2 * POOL_PAGES);
	assert_int_equal(st.overwritten_pages, 0);
	hmm_devmem_free(dm, pages, POOL_PAGES);
	assert_int_equal(hmm_devmem_destroy(dm), 0);
	munmap(vram, POOL);
}

/* Read the device copy of each page of [buf, buf+len) where it lives now. */
static void assert_device_zeros(struct hmm_mm *mm, struct hmm_devmem *dm, char *buf,
				size_t len)
{
	for (size_t off = 0; off < len; off += PG) {
		struct hmm_devmem *where = NULL;
		uint64_t page = 0;

		assert_int_equal(hmm_mm_page_where(mm, buf + off, &where, &page), HMM_PAGE_DEVICE);
		assert_ptr_equal(where, dm);
		assert_zeros(hmm_devmem_page_ptr(dm, page), PG, "device copy of an untouched page");
	}
}

/* Never-touched pages migrate as zeros into dirty device memory: a whole 2 MiB chunk and
 * single pages, first into memory left by the pool's earlier life, then into pages an
 * earlier migration of data used. The CPU reads them back as zeros. */
static void test_migrate_untouched(void **state)
{
	enum hmm_backend backend = (enum hmm_backend)(uintptr_t)*state;
	struct hmm_mm *mm = tmm_new(backend, 0);
	void *vram = dirty_vram();
	struct hmm_devmem *dm;
	struct hmm_devmem_stats st;
	struct hmm_migrate_result r;
	static int owner;
	size_t len = M2 + 16 * PG;

	assert_int_equal(hmm_devmem_create(&(struct hmm_devmem_desc){ .owner = &owner,
					   .base = vram, .size = POOL }, &dm), 0);
	for (int round = 0; round < 2; round++) {
		char *buf = tbuf_new(M2 + M2, false);

		assert_int_equal(hmm_region_add(mm, buf, len), 0);
		assert_int_equal(hmm_migrate_to_device(mm, dm, buf, len, &r), 0);
		assert_int_equal(r.migrated, len / PG);
		assert_int_equal(r.chunks, 1);
		assert_device_zeros(mm, dm, buf, len);
		assert_zeros(buf, len, "CPU view after the fault back");
		assert_int_equal(hmm_devmem_used_pages(dm), 0);
		assert_int_equal(hmm_region_remove(mm, buf), 0);

		/* leave dirty pages behind for the next round: data migrated and back */
		memset(buf, 0x77, len);
		assert_int_equal(hmm_region_add(mm, buf, len), 0);
		assert_int_equal(hmm_migrate_to_device(mm, dm, buf, len, &r), 0);
		assert_int_equal(r.migrated, len / PG);
		assert_int_equal(hmm_migrate_to_system(mm, dm, buf, len, &r), 0);
		assert_int_equal(r.migrated, len / PG);
		assert_int_equal(hmm_region_remove(mm, buf), 0);
		munmap(buf, M2 + M2);
	}
	hmm_devmem_get_stats(dm, &st);
	assert_int_equal(st.overwritten_pages, 4 * (len / PG));
	assert_int_equal(st.scrubbed_pages, 0);
	assert_int_equal(hmm_devmem_destroy(dm), 0);
	hmm_mm_destroy(mm);
	munmap(vram, POOL);
}

#define BACKEND_CASE(b) { #b, test_migrate_untouched, NULL, NULL, (void *)(uintptr_t)(b) }

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_realloc_across_owners),
		BACKEND_CASE(HMM_BACKEND_UFFD_THREAD),
		BACKEND_CASE(HMM_BACKEND_UFFD_SIGBUS),
		BACKEND_CASE(HMM_BACKEND_MPROTECT),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

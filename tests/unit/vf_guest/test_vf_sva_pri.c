// SPDX-License-Identifier: MIT
/* Page requests of a guest of vgpud (ABI 2.4, vgpu/sva.h): the IOMMU is the daemon's, the
 * bound process is this one, so a GPU access through SVA to a managed page this process
 * keeps in device memory (hmm's SIGBUS or mprotect backend, which the kernel's copy cannot
 * fault in) is forwarded to this process on its SVA connection; libvgpu-vf faults the page
 * in through the hmm mm and answers, vgpud retries the access. Without it, the access
 * faults; unanswered requests time out into the channel's IOMMU fault (no hang); a page
 * the process cannot make present still faults; malformed answers change nothing. Runs
 * against a real vgpud (../../bin/vgpud), skipped with the reason when it is not built. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/err.h"
#include "hmm/hmm.h"
#include "vf_guest/include/vgpu_vf.h"
#include <vgpu/gpfifo.h>
#include <vgpu/sva.h>
#include "tests/unit/vf_guest/vgpud_fixture.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#define UUID		"7e570000-0000-4000-8000-00000000aa17"
#define M2		(2ull << 20)
#define PG		4096ull
#define WAIT_NS		(30ull * 1000 * 1000 * 1000)
#define NPAGES		16

struct fx {
	struct vgpu_vf *vf;
	struct vgpu_vaspace *as;
	struct vgpu_channel *ch;
	struct hmm_mm *mm;
	struct hmm_devmem *dm;
	uint8_t *buf;			/* NPAGES managed pages, 2 MiB aligned */
	uint8_t *plain;			/* NPAGES ordinary pages */
};

static int dm_owner;

static void *aligned_anon(void)
{
	uint8_t *p = mmap(NULL, 2 * M2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			  -1, 0);
	uint8_t *a;

	assert_true(p != MAP_FAILED);
	a = (uint8_t *)(((uintptr_t)p + M2 - 1) & ~(M2 - 1));
	madvise(a, M2, MADV_NOHUGEPAGE);
	return a;
}

static void map_same(struct fx *f, const void *p, uint64_t len)
{
	int ret = vgpu_va_map_sva(f->as, (uintptr_t)p, p, len, PG, 0);

	if (ret)
		fail_msg("map_sva: %s (%s)", vgpu_vf_strerror(ret), vgpu_vf_last_error(f->vf));
}

/* The VF bound, one channel, an hmm mm with @backend whose NPAGES managed pages at buf hold
 * ints from 7 and sit in device memory, and NPAGES ordinary pages; both mapped at GPU VA
 * == CPU VA. Skips when the backend cannot run here. */
static void fx_open(struct fx *f, enum hmm_backend backend)
{
	struct vgpu_vf_opts vo = { .socket = vfx_group.sock, .quiet = true };
	struct vgpu_channel_opts co = { 0 };
	struct hmm_migrate_result res;
	struct hmm_uffd_caps caps;
	int ret;

	vfx_skip_if_down();
	hmm_uffd_probe(&caps);
	if (backend == HMM_BACKEND_UFFD_SIGBUS && (!caps.available || !caps.sigbus ||
						   !caps.events || (!caps.move && !caps.wp))) {
		print_message("skip: %s\n", caps.why);
		skip();
	}
	memset(f, 0, sizeof(*f));
	assert_int_equal(vfx_vf_open(&vo, &f->vf), 0);
	assert_int_equal(vgpu_vaspace_create(f->vf, &f->as), 0);
	assert_int_equal(vgpu_channel_create(f->vf, f->as, &co, &f->ch), 0);
	ret = vgpu_sva_bind(f->vf);
	if (ret)
		fail_msg("bind: %s (%s)", vgpu_vf_strerror(ret), vgpu_vf_last_error(f->vf));
	assert_int_equal(hmm_mm_create(&(struct hmm_mm_opts){ .backend = backend }, &f->mm), 0);
	assert_int_equal(hmm_devmem_create(&(struct hmm_devmem_desc){ .owner = &dm_owner,
					   .size = M2 }, &f->dm), 0);
	f->buf = aligned_anon();
	f->plain = aligned_anon();
	assert_int_equal(hmm_region_add(f->mm, f->buf, NPAGES * PG), 0);
	for (size_t i = 0; i < NPAGES * PG / 4; i++)
		((uint32_t *)f->buf)[i] = (uint32_t)(i + 7);
	assert_int_equal(hmm_migrate_to_device(f->mm, f->dm, f->buf, NPAGES * PG, &res), 0);
	for (size_t i = 0; i < NPAGES; i++)
		assert_int_equal(hmm_mm_page_where(f->mm, f->buf + i * PG, NULL, NULL),
				 HMM_PAGE_DEVICE);
	memset(f->plain, 0xee, NPAGES * PG);
	map_same(f, f->buf, NPAGES * PG);
	map_same(f, f->plain, NPAGES * PG);
}

/* Close the VF first (vgpud unbinds, page requests end), then the mm. */
static void fx_close(struct fx *f)
{
	vfx_vf_close(f->vf);
	assert_int_equal(hmm_region_remove(f->mm, f->buf), 0);
	hmm_mm_destroy(f->mm);
	assert_int_equal(hmm_devmem_destroy(f->dm), 0);
}

static void fx_new_channel(struct fx *f)
{
	struct vgpu_channel_opts co = { 0 };

	vgpu_channel_destroy(f->ch);
	assert_int_equal(vgpu_channel_create(f->vf, f->as, &co, &f->ch), 0);
}

/* Copy @len bytes @src -> @dst on the channel and wait: 0 or the channel error code
 * (*@fault_va: the VA the host reported). */
static uint32_t gpu_copy(struct fx *f, const void *src, void *dst, uint64_t len,
			 uint64_t *fault_va)
{
	uint32_t dw[32], code = 0;
	struct vgpu_fence fe;
	struct vgpu_pb pb;
	uint64_t va = 0;
	int ret;

	vgpu_pb_init(&pb, dw, 32);
	vgpu_pb_copy(&pb, (uintptr_t)src, (uintptr_t)dst, len);
	assert_int_equal(pb.err, 0);
	assert_int_equal(vgpu_submit(f->ch, pb.dw, pb.len, &fe), 0);
	ret = vgpu_fence_wait(&fe, WAIT_NS);
	if (!ret)
		return 0;
	assert_int_equal(ret, -VGPU_ECHANERR);
	assert_int_equal(vgpu_channel_error(f->ch, &code, &va), -VGPU_ECHANERR);
	/* A fault's event, which carries its VA, may trail the channel's error word. */
	while (fault_va && !va &&
	       (code == VGPU_CHAN_ERR_IOMMU_FAULT || code == VGPU_CHAN_ERR_MMU_FAULT)) {
		usleep(1000);
		vgpu_channel_error(f->ch, &code, &va);
	}
	if (fault_va)
		*fault_va = va;
	return code;
}

static void check_words(const uint8_t *p, size_t first_page, size_t npages)
{
	const uint32_t *w = (const uint32_t *)p;

	for (size_t i = 0; i < npages * PG / 4; i++)
		if (w[i] != (uint32_t)(first_page * PG / 4 + i + 7))
			fail_msg("word %zu: %u", i, w[i]);
}

struct backend_case {
	const char *name;
	enum hmm_backend backend;
};

static const struct backend_case backends[] = {
	{ "page requests to the guest, SIGBUS backend", HMM_BACKEND_UFFD_SIGBUS },
	{ "page requests to the guest, mprotect backend", HMM_BACKEND_MPROTECT },
};

/* Without page requests a device-resident managed page faults (the kernel's copy cannot
 * bring it); with them the GPU reads and writes such pages, which come back to system
 * memory with their data, and the channel has no error. An address with no mapping is
 * refused by the guest and still ends in the IOMMU fault. */
static void test_managed(void **state)
{
	const struct backend_case *c = *state;
	uint64_t fva = 0, served, refused;
	struct fx f;
	int ret;

	fx_open(&f, c->backend);
	assert_int_equal(gpu_copy(&f, f.buf, f.plain, PG, &fva), VGPU_CHAN_ERR_IOMMU_FAULT);
	assert_true(fva == (uintptr_t)f.buf);
	fx_new_channel(&f);
	ret = vgpu_sva_pri_enable(f.vf, f.mm);
	if (ret)
		fail_msg("pri_enable: %s (%s)", vgpu_vf_strerror(ret), vgpu_vf_last_error(f.vf));
	/* read pages 0..3 of device memory, write pages 8..11 from ordinary memory */
	assert_int_equal(gpu_copy(&f, f.buf, f.plain, 4 * PG, NULL), 0);
	check_words(f.plain, 0, 4);
	for (size_t i = 0; i < 4 * PG / 4; i++)
		((uint32_t *)(f.plain + 4 * PG))[i] = 0xabc00000u + (uint32_t)i;
	assert_int_equal(gpu_copy(&f, f.plain + 4 * PG, f.buf + 8 * PG, 4 * PG, NULL), 0);
	for (size_t i = 0; i < 12; i++)
		if (i < 4 || i >= 8)
			assert_int_equal(hmm_mm_page_where(f.mm, f.buf + i * PG, NULL, NULL),
					 HMM_PAGE_SYSTEM);
	assert_int_equal(hmm_mm_page_where(f.mm, f.buf + 12 * PG, NULL, NULL), HMM_PAGE_DEVICE);
	assert_memory_equal(f.buf + 8 * PG, f.plain + 4 * PG, 4 * PG);
	check_words(f.buf + 4 * PG, 4, 4);	/* the CPU brings these back itself */
	vgpu_sva_pri_stats(f.vf, &served, &refused);
	assert_true(served >= 8);
	assert_int_equal(refused, 0);
	/* a hole: the guest cannot make it present, the access faults at its address */
	uint8_t *hole = f.plain + 8 * PG;

	assert_int_equal(munmap(hole, PG), 0);
	fva = 0;
	assert_int_equal(gpu_copy(&f, hole, f.plain, PG, &fva), VGPU_CHAN_ERR_IOMMU_FAULT);
	assert_true(fva == (uintptr_t)hole);
	vgpu_sva_pri_stats(f.vf, &served, &refused);
	assert_true(refused >= 1);
	/* and the channel after it works */
	fx_new_channel(&f);
	assert_int_equal(gpu_copy(&f, f.buf + 12 * PG, f.plain, PG, NULL), 0);
	check_words(f.plain, 12, 1);
	fx_close(&f);
}

/* A guest that turns page requests on but never answers them: the access waits for vgpud's
 * page response timeout and ends in the IOMMU fault, never a hang; the VF still works. */
static void test_unanswered(void **state)
{
	struct vgpu_sva_req rq = { .magic = VGPU_SVA_MAGIC, .abi_version = VGPU_ABI_VERSION,
				   .op = VGPU_SVA_OP_PRI };
	struct vgpu_sva_reply rp;
	uint64_t fva = 0;
	struct fx f;

	(void)state;
	fx_open(&f, HMM_BACKEND_MPROTECT);
	assert_int_equal(vgpu_sva_call_raw(f.vf, &rq, sizeof(rq), &rp), 0);
	assert_int_equal(rp.status, 0);
	assert_int_equal(gpu_copy(&f, f.buf, f.plain, PG, &fva), VGPU_CHAN_ERR_IOMMU_FAULT);
	assert_true(fva == (uintptr_t)f.buf);
	assert_true(f.plain[0] == 0xee);
	/* ordinary memory needs no request: a fresh channel still reaches it */
	fx_new_channel(&f);
	assert_int_equal(gpu_copy(&f, f.plain, f.plain + PG, PG, NULL), 0);
	fx_close(&f);
}

/* Refusals name what is wrong and change nothing: page requests before a bind, twice, with
 * no mm; an answer nobody asked for, or with reserved bits set, gets no reply and leaves
 * the connection in step (the request after it is answered). */
static void test_bad_input(void **state)
{
	struct {
		struct vgpu_sva_page_resp a;
		struct vgpu_sva_req rq;
	} two = {
		.a = { .magic = VGPU_SVA_PRQ_MAGIC, .id = 77, .status = 0 },
		.rq = { .magic = VGPU_SVA_MAGIC, .abi_version = VGPU_ABI_VERSION,
			.op = VGPU_SVA_OP_BIND },
	};
	struct vgpu_sva_req rq = { .magic = VGPU_SVA_MAGIC, .abi_version = VGPU_ABI_VERSION,
				   .op = VGPU_SVA_OP_PRI };
	struct vgpu_vf_opts vo = { .socket = vfx_group.sock, .quiet = true };
	struct vgpu_sva_reply rp;
	struct fx f;

	(void)state;
	fx_open(&f, HMM_BACKEND_MPROTECT);
	assert_int_equal(vgpu_sva_pri_enable(f.vf, NULL), -EINVAL);
	assert_non_null(strstr(vgpu_vf_last_error(f.vf), "no hmm mm"));
	/* a stray answer before PRI is on, then one with reserved bits once it is */
	assert_int_equal(vgpu_sva_call_raw(f.vf, &two, sizeof(two), &rp), 0);
	assert_int_equal(rp.status, -EBUSY);	/* the BIND after it: already bound */
	assert_int_equal(vgpu_sva_pri_enable(f.vf, f.mm), 0);
	assert_int_equal(vgpu_sva_pri_enable(f.vf, f.mm), -EBUSY);
	assert_non_null(strstr(vgpu_vf_last_error(f.vf), "already"));
	two.a.reserved = 1;
	assert_int_equal(vgpu_sva_call_raw(f.vf, &two, sizeof(two), &rp), 0);
	assert_int_equal(rp.status, -EBUSY);
	/* the host refuses a second PRI on the connection */
	assert_int_equal(vgpu_sva_call_raw(f.vf, &rq, sizeof(rq), &rp), 0);
	assert_int_equal(rp.status, -EBUSY);
	/* still served */
	assert_int_equal(gpu_copy(&f, f.buf, f.plain, PG, NULL), 0);
	check_words(f.plain, 0, 1);
	fx_close(&f);

	/* not bound: refused by the library, and by the host when asked raw */
	assert_int_equal(vfx_vf_open(&vo, &f.vf), 0);
	assert_int_equal(hmm_mm_create(&(struct hmm_mm_opts){ .backend = HMM_BACKEND_MPROTECT },
				       &f.mm), 0);
	assert_int_equal(vgpu_sva_pri_enable(f.vf, f.mm), -ENOENT);
	assert_int_equal(vgpu_sva_call_raw(f.vf, &rq, sizeof(rq), &rp), 0);
	assert_int_equal(rp.status, -ENOENT);
	assert_non_null(strstr(rp.why, "not bound"));
	vfx_vf_close(f.vf);
	hmm_mm_destroy(f.mm);
}

int main(void)
{
	struct CMUnitTest tests[8];
	size_t n = 0;

	for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++)
		tests[n++] = (struct CMUnitTest){ backends[i].name, test_managed, NULL,
						  vfx_case_teardown, (void *)&backends[i] };
	tests[n++] = (struct CMUnitTest){ "unanswered page requests end in the channel error",
					  test_unanswered, NULL, vfx_case_teardown, NULL };
	tests[n++] = (struct CMUnitTest){ "page requests: bad input", test_bad_input, NULL,
					  vfx_case_teardown, NULL };
	vfx_group_init(VFX_ONE_VF("32M"), "/dev/shm/vgpu-sva-pri", UUID, "vgpu-512M");
	return _cmocka_run_group_tests("vf_sva_pri", tests, n, vfx_group_setup,
				       vfx_group_teardown);
}

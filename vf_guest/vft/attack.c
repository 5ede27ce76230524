// SPDX-License-Identifier: MIT
/* The in-VM isolation attacks (vgpu-vf-test --attack), a table of cases like the suite.
 *
 * What an attacker inside a VM can reach: BAR0's doorbell register (any peer id, any
 * vector), the device fd (pread/pwrite/mmap at any offset), the mailbox (any RM handle) and
 * its own doorbell page (any token). Each case tries one of these against another function
 * and checks that it gets nothing but an error of its own: QEMU drops rings of peers and
 * vectors it was not given (vgpud never announces other guests), vfio refuses accesses past
 * BAR2's end, the RM refuses handles of another VF (-VGPU_EFOREIGN) and the device drops
 * tokens of channels the function does not own. What the host sees (another VF's counters
 * standing still, the attacker's invalid tokens counted) is checked by the harness
 * (tests/vm/qemu-attack.sh). */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <vgpu/gmmu.h>
#include <vgpu/gpfifo.h>
#include <vgpu/rm.h>
#include <vgpu/vf_bar.h>

#include "common/compiler.h"
#include "common/err.h"
#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/include/vgpu_vf_raw.h"
#include "vf_guest/vf_pci.h"
#include "vf_guest/vft/vft.h"

#define VM_SKIP		(-1)
#define VM_MAX_PEER	64		/* vgpud serves VFs 1..63 */
#define VM_QUIET_MS	200		/* how long nothing may arrive after a dropped ring */

struct vft_vm {
	FILE *out;
	struct vgpu_vf *vf;
	struct vgpu_vf_transport *t;
	struct vgpu_vf_info info;
	uint32_t own_peer;		/* IVPosition */
	uint32_t host_peer;		/* vgpud's: the BAR2 header's host_peer */
	char skip_why[200];
};

static void vm_diag(struct vft_vm *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void vm_diag(struct vft_vm *a, const char *fmt, ...)
{
	va_list ap;

	fputs("# ", a->out);
	va_start(ap, fmt);
	vfprintf(a->out, fmt, ap);
	va_end(ap);
	fputc('\n', a->out);
}

#define VM_CHECK(a, cond, ...)							\
	do {									\
		if (!(cond)) {							\
			vm_diag(a, "%s:%d: check '%s' failed", __func__, __LINE__, #cond); \
			vm_diag(a, __VA_ARGS__);				\
			return 1;						\
		}								\
	} while (0)

static void sleep_ms(unsigned int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* After @ms of quiet, the interrupts each of our vectors got (consumed). */
static uint64_t vectors_fired(struct vft_vm *a, unsigned int ms)
{
	uint64_t total = 0, n;

	sleep_ms(ms);
	for (unsigned int v = 0; v < a->t->ops->nr_vectors(a->t); v++)
		if (!vf_vfio_take(a->t, v, &n))
			total += n;
	return total;
}

/* Before ringing: let what our own last calls raised arrive and drop it (the driver often
 * sees a reply by spinning, and its interrupt lands later). Quiet for 100 ms, at most 2 s. */
static void drain(struct vft_vm *a)
{
	for (int i = 0; i < 20 && vectors_fired(a, 100); i++)
		;
}

/* Our own mailbox still answers. */
static int still_own(struct vft_vm *a)
{
	int ret = vgpu_vf_ping(a->vf, "still mine", 10);

	VM_CHECK(a, ret == 0, "ping after the attack: %d (%s)", ret, vgpu_vf_strerror(ret));
	return 0;
}

/* ---- cases ---- */

static int a_attach(struct vft_vm *a)
{
	uint64_t hp_off = vf_bar_header_off(vf_vfio_bar2_size(a->t)) +
			  offsetof(struct vf_bar_header, host_peer);
	uint32_t pos = 0, host = 0;

	VM_CHECK(a, vf_vfio_bar0_read(a->t, VF_PCI_REG_IVPOSITION, &pos) == 0, "IVPosition");
	VM_CHECK(a, vf_vfio_bar2_pread(a->t, hp_off, &host, sizeof(host)) == sizeof(host),
		 "header host_peer");
	a->own_peer = pos;
	a->host_peer = host;
	vm_diag(a, "VF %u, peer id %u, vgpud peer %u, BAR2 %llu MiB, %u vectors", a->info.vf_id,
		pos, host, (unsigned long long)(vf_vfio_bar2_size(a->t) >> 20),
		a->t->ops->nr_vectors(a->t));
	/* Peer mode: we are the VF number and vgpud 0; behind vf<N>.master.sock (ABI 2.3) we
	 * are 0 and vgpud VF_EP_HOST_PEER. */
	if (host == 0)
		VM_CHECK(a, pos == a->info.vf_id, "peer id %u is not the VF number %u", pos,
			 a->info.vf_id);
	else
		VM_CHECK(a, pos == 0 && host == VF_EP_HOST_PEER, "peer id %u, vgpud's %u: not "
			 "the master layout (0 and %u)", pos, host, VF_EP_HOST_PEER);
	return 0;
}

static int a_other_peers(struct vft_vm *a)
{
	uint64_t got;
	unsigned int rings = 0;

	drain(a);
	for (uint32_t peer = 0; peer <= VM_MAX_PEER; peer++) {
		if (peer == a->own_peer || peer == a->host_peer)
			continue;
		for (uint32_t v = 0; v < VF_NR_VECTORS + 2; v++, rings++)
			VM_CHECK(a, vf_vfio_bar0_write(a->t, VF_PCI_REG_DOORBELL,
						       vf_pci_doorbell(peer, v)) == 0, "BAR0 write");
	}
	got = vectors_fired(a, VM_QUIET_MS);
	vm_diag(a, "rang %u doorbells of peers 0..%u (not us, not vgpud)", rings, VM_MAX_PEER);
	VM_CHECK(a, got == 0, "%llu interrupts arrived", (unsigned long long)got);
	/* The control: a ring of our own id is delivered (to us), so the check above can see
	 * an interrupt when there is one. */
	VM_CHECK(a, vf_vfio_bar0_write(a->t, VF_PCI_REG_DOORBELL,
				       vf_pci_doorbell(a->own_peer, VF_VEC_EVENT)) == 0, "BAR0 write");
	got = vectors_fired(a, VM_QUIET_MS);
	VM_CHECK(a, got >= 1, "a ring of our own peer id did not arrive");
	return still_own(a);
}

static int a_host_vectors(struct vft_vm *a)
{
	uint64_t got;

	drain(a);
	/* vgpud has VF_NR_VECTORS; QEMU uses the low 8 bits of the vector field. */
	for (uint32_t v = VF_NR_VECTORS; v < 256; v++)
		VM_CHECK(a, vf_vfio_bar0_write(a->t, VF_PCI_REG_DOORBELL,
					       vf_pci_doorbell(a->host_peer, v)) == 0, "BAR0 write");
	VM_CHECK(a, vf_vfio_bar0_write(a->t, VF_PCI_REG_DOORBELL, 0x0000ffffu) == 0, "BAR0 write");
	got = vectors_fired(a, VM_QUIET_MS);
	VM_CHECK(a, got == 0, "%llu interrupts arrived", (unsigned long long)got);
	return still_own(a);
}

static int a_bar2_rw(struct vft_vm *a)
{
	uint64_t size = vf_vfio_bar2_size(a->t);
	uint8_t buf[8] = { 0 };
	long n;

	n = vf_vfio_bar2_pread(a->t, size, buf, 4);
	VM_CHECK(a, n < 0, "pread at BAR2's end gave %ld", n);
	n = vf_vfio_bar2_pread(a->t, size + (1ull << 30), buf, 4);
	VM_CHECK(a, n < 0, "pread 1 GiB past BAR2's end gave %ld", n);
	n = vf_vfio_bar2_pwrite(a->t, size, buf, 4);
	VM_CHECK(a, n < 0, "pwrite at BAR2's end gave %ld", n);
	/* Across the end: at most the bytes inside. */
	n = vf_vfio_bar2_pread(a->t, size - 2, buf, 8);
	VM_CHECK(a, n <= 2, "pread across BAR2's end moved %ld bytes", n);
	/* The header page inside is readable this way: the refusals above are about the end. */
	n = vf_vfio_bar2_pread(a->t, vf_bar_header_off(size), buf, 8);
	VM_CHECK(a, n == 8 && !memcmp(buf, &(uint64_t){ VF_BAR_MAGIC }, 8),
		 "pread of our own header gave %ld", n);
	return still_own(a);
}

static int a_bar2_mmap(struct vft_vm *a)
{
	uint64_t size = vf_vfio_bar2_size(a->t);
	int ret;

	ret = vf_vfio_region_mmap(a->t, VF_PCI_REGION_BAR2, 0, size + 4096);
	VM_CHECK(a, ret < 0, "mmap of BAR2 + 1 page succeeded");
	ret = vf_vfio_region_mmap(a->t, VF_PCI_REGION_BAR2, size, 4096);
	VM_CHECK(a, ret < 0, "mmap at BAR2's end succeeded");
	ret = vf_vfio_region_mmap(a->t, VF_PCI_REGION_BAR2 + 1, 0, 4096);
	VM_CHECK(a, ret < 0, "mmap of the absent BAR3 succeeded");
	ret = vf_vfio_region_mmap(a->t, VF_PCI_REGION_BAR2, size - 4096, 4096);
	VM_CHECK(a, ret == 0, "mmap of our last page failed: %d", ret);
	return still_own(a);
}

static int a_forged_handles(struct vft_vm *a)
{
	struct vgpu_vf *vf = a->vf;
	uint32_t client_idx;
	struct vgpu_mem *m;
	int ret;

	if (!vgpu_vf_rm_available(vf)) {
		snprintf(a->skip_why, sizeof(a->skip_why), "no RM: %s", vgpu_vf_rm_why(vf));
		return VM_SKIP;
	}
	client_idx = VGPU_RM_CLIENT_IDX(vgpu_vf_rm_client(vf));
	ret = vgpu_mem_alloc(vf, VGPU_MEM_VRAM, 2 << 20, VGPU_GMMU_PAGE_2M, &m);
	VM_CHECK(a, ret == 0, "VRAM alloc: %d (%s)", ret, vgpu_vf_strerror(ret));
	for (uint32_t other = 1; other <= 8; other++) {
		uint32_t forged = VGPU_RM_CLIENT_HANDLE(other, client_idx);

		if (other == a->info.vf_id)
			continue;
		ret = vgpu_vf_rm_free_as(vf, forged, vgpu_mem_rm_handle(m));
		VM_CHECK(a, ret == -VGPU_EFOREIGN, "our object through VF %u's client: %d (%s)",
			 other, ret, vgpu_vf_strerror(ret));
		ret = vgpu_vf_rm_free_as(vf, forged, forged);
		VM_CHECK(a, ret == -VGPU_EFOREIGN, "VF %u's client itself: %d (%s)", other, ret,
			 vgpu_vf_strerror(ret));
	}
	ret = vgpu_mem_free(m);
	VM_CHECK(a, ret == 0, "our object no longer frees: %d", ret);
	return still_own(a);
}

static int a_foreign_tokens(struct vft_vm *a)
{
	struct vgpu_vf *vf = a->vf;
	struct vgpu_doorbell_page *db = vgpu_vf_doorbell_page(vf);
	struct vgpu_vaspace *as = NULL;
	struct vgpu_channel *ch = NULL;
	struct vgpu_fence f;
	uint32_t nop = 0, code = 0;
	int ret, err;

	if (!vgpu_vf_rm_available(vf) || !db) {
		snprintf(a->skip_why, sizeof(a->skip_why), "%s",
			 !db ? "no doorbell page in BAR2" : vgpu_vf_rm_why(vf));
		return VM_SKIP;
	}
	ret = vgpu_vaspace_create(vf, &as);
	if (!ret)
		ret = vgpu_channel_create(vf, as, NULL, &ch);
	if (ret)
		goto out;
	/* Every channel id that is not ours, on every runlist, and garbage. */
	for (uint32_t rl = 0; rl < a->info.nr_runlists; rl++)
		for (uint32_t chid = 0; chid < 64; chid++)
			if (chid != vgpu_channel_id(ch) || rl != vgpu_channel_runlist(ch))
				vgpu_doorbell_write(db, vgpu_token(rl, chid));
	vgpu_doorbell_write(db, 0xffffu);
	vgpu_doorbell_write(db, vgpu_token(0x7fff, vgpu_channel_id(ch)));
	/* Our own channel still runs (a NOP) and is not in error. */
	ret = vgpu_submit(ch, &nop, 1, &f);
	if (!ret)
		ret = vgpu_fence_wait(&f, 0);
	if (!ret)
		ret = vgpu_channel_error(ch, &code, NULL);
out:
	vgpu_channel_destroy(ch);
	err = vgpu_vaspace_destroy(as);
	VM_CHECK(a, ret == 0, "our channel after foreign tokens: %d (%s), error %u (%s)", ret,
		 vgpu_vf_strerror(ret), code, vgpu_vf_last_error(vf));
	VM_CHECK(a, err == 0, "our VA space no longer frees: %d (%s)", err, vgpu_vf_strerror(err));
	return still_own(a);
}

/* ---- the table ---- */

static const struct vft_vm_case {
	const char *name;
	int (*fn)(struct vft_vm *a);
} vm_cases[] = {
	{ "attack: attach over vfio, peer ids as the header says", a_attach },
	{ "attack: BAR0 doorbells to other peers are dropped", a_other_peers },
	{ "attack: BAR0 doorbells to vgpud's missing vectors are dropped", a_host_vectors },
	{ "attack: pread/pwrite past BAR2's end refused", a_bar2_rw },
	{ "attack: mmap past BAR2's end refused", a_bar2_mmap },
	{ "attack: RM handles forged with other VFs' ids are foreign", a_forged_handles },
	{ "attack: other channels' work-submit tokens in our doorbell page", a_foreign_tokens },
};

int vft_vm_attack(const struct vft_vm_opts *o, FILE *out)
{
	struct vft_vm a = { .out = out };
	struct vgpu_vf_opts vo = { .quiet = !o->verbose };
	unsigned int n = VGPU_ARRAY_SIZE(vm_cases), pass = 0, fail = 0, skip = 0;
	int ret;

	fprintf(out, "1..%u\n", n);
	ret = vgpu_vf_transport_vfio(o->bdf, &a.t);
	if (!ret) {
		vo.transport = a.t;
		ret = vgpu_vf_open(&vo, &a.vf);
		if (ret)
			a.t->ops->destroy(a.t);
	}
	if (ret) {
		fprintf(out, "not ok 1 - attack: attach over vfio: %s\n0 passed, %u failed\n",
			vgpu_vf_strerror(ret), n);
		return (int)n;
	}
	vgpu_vf_get_info(a.vf, &a.info);
	for (unsigned int i = 0; i < n; i++) {
		a.skip_why[0] = 0;
		ret = vm_cases[i].fn(&a);
		if (ret == VM_SKIP) {
			fprintf(out, "ok %u - %s # SKIP %s\n", i + 1, vm_cases[i].name, a.skip_why);
			skip++;
		} else if (ret) {
			fprintf(out, "not ok %u - %s\n", i + 1, vm_cases[i].name);
			fail++;
		} else {
			fprintf(out, "ok %u - %s\n", i + 1, vm_cases[i].name);
			pass++;
		}
		fflush(out);
	}
	vgpu_vf_close(a.vf);
	if (skip)
		fprintf(out, "%u passed, %u failed, %u skipped\n", pass, fail, skip);
	else
		fprintf(out, "%u passed, %u failed\n", pass, fail);
	return (int)fail;
}

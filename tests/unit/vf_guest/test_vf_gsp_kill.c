// SPDX-License-Identifier: MIT
/* Exactly-once work across GSP crashes: a real vgpud with one slice, a local guest with four
 * busy channels whose every submission is non-idempotent (AXPY y += a*x; REDUCE_ADD then a
 * FILL of its own input; COPY then a FILL of its own source; SEM_ACQUIRE == i then
 * SEM_RELEASE i + 1, a counter), and vgpu-gsp killed (-9) while their work runs, KILLS times;
 * half of each round waits at a gate the test opens only after the reset's replay, so it is
 * surely in flight across the reset.
 * A device reset replays every channel; the work in flight must then either complete exactly
 * once or its channel must report an error the guest sees. Every completed fence's result is
 * checked against the CPU's; a fence that neither completes nor errors fails the test. */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <vgpu/gmmu.h>
#include <vgpu/gpfifo.h>

#include "common/err.h"
#include "vf_guest/include/vgpu_vf.h"
#include "tests/unit/vf_guest/vgpud_fixture.h"

#define UUID		"7e570000-0000-4000-8000-00000000aa07"
#define KILLS		8
#define SUBS		12		/* submissions per channel per kill */
#define GATED		(SUBS / 2)	/* the first submission behind the gate */
#define ELEMS		(1u << 20)	/* elements per AXPY / REDUCE / COPY (4 MiB) */
#define BUF_BYTES	((uint64_t)ELEMS * 4)
#define PS		VGPU_GMMU_PAGE_2M

enum kind { K_AXPY, K_REDUCE, K_COPY, K_SEM, K_NR };

static const char *const kind_name[K_NR] = { "AXPY", "REDUCE_ADD+FILL", "COPY+FILL", "SEM" };

/* One guest buffer, mapped at va. */
struct buf {
	struct vgpu_mem *m;
	uint64_t va;
	void *cpu;
};

struct work {
	struct vgpu_vf *vf;
	struct vgpu_vaspace *as;
	uint64_t next_va;
	struct vgpu_channel *ch[K_NR];
	struct vgpu_fence fence[K_NR][SUBS];
	bool submitted[K_NR][SUBS];
	struct buf x, y;		/* AXPY: y has SUBS slices */
	struct buf u, sums;		/* REDUCE: input, one 64-bit sum per submission */
	struct buf src, dst;		/* COPY: source, SUBS destination slices */
	struct buf sem;			/* SEM: the counter; the gate at +64 */
	volatile uint64_t *gate;	/* the round's second half waits for it to be 1 */
	unsigned int completed, errored, in_flight_at_kill, across_reset;
};

static struct work w;

/* ---- the GSP process ---- */

/* Pid of vgpud's vgpu-gsp child, or 0 while there is none. */
static pid_t gsp_pid(pid_t daemon)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	pid_t found = 0;

	if (!d)
		return 0;
	while (!found && (e = readdir(d))) {
		char path[300], comm[64];
		int pid, ppid;
		FILE *f;

		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fscanf(f, "%d (%63[^)]) %*c %d", &pid, comm, &ppid) == 3 && ppid == daemon &&
		    !strcmp(comm, "vgpu-gsp"))
			found = pid;
		fclose(f);
	}
	closedir(d);
	return found;
}

/* A vgpu-gsp other than @old running (a restart); waits as long as the restart takes. */
static pid_t gsp_wait_other(pid_t daemon, pid_t old)
{
	for (;;) {
		pid_t p = gsp_pid(daemon);

		if (p && p != old)
			return p;
		usleep(10 * 1000);
	}
}

/* vgpud's count of finished device resets (`vgpuctl --json status`: the RM's replay is
 * done when it moves), or -1. */
static long device_resets(void)
{
	const struct vfx *fx = &vfx_group.fx;
	char prog[PATH_MAX + 16], csock[PATH_MAX], out[PATH_MAX], buf[8192] = "", *p;
	char *argv[] = { prog, "--socket", csock, "--json", "status", NULL };
	long n = -1;
	FILE *f;

	snprintf(prog, sizeof(prog), "%s/vgpuctl", fx->bindir);
	snprintf(csock, sizeof(csock), "%s/control.sock", fx->rundir);
	snprintf(out, sizeof(out), "%s/status.json", fx->tmpdir);
	unlink(out);
	if (vfx_wait(vfx_spawn(argv, out), 30) || !(f = fopen(out, "r")))
		return -1;
	buf[fread(buf, 1, sizeof(buf) - 1, f)] = 0;
	fclose(f);
	p = strstr(buf, "\"device_resets\"");
	if (p && (p = strchr(p, ':')))
		n = strtol(p + 1, NULL, 10);
	return n;
}

/* Until the device reset number @n finished (its replay done). */
static void resets_reach(long n)
{
	while (device_resets() < n)
		usleep(10 * 1000);
}

/* ---- buffers and channels ---- */

static void buf_new(struct buf *b, uint64_t size)
{
	assert_int_equal(vgpu_mem_alloc(w.vf, VGPU_MEM_VRAM, size, PS, &b->m), 0);
	b->va = w.next_va;
	w.next_va += (vgpu_mem_size(b->m) + PS - 1) / PS * PS + PS;
	assert_int_equal(vgpu_va_map(w.as, b->va, b->m, 0, vgpu_mem_size(b->m), PS, 0), 0);
	b->cpu = vgpu_mem_cpu(b->m);
	assert_non_null(b->cpu);
}

static void buf_del(struct buf *b)
{
	vgpu_va_unmap(w.as, b->va, vgpu_mem_size(b->m));
	vgpu_mem_free(b->m);
}

static void chan_new(enum kind k)
{
	struct vgpu_channel_opts o = { .gpfifo_entries = 64, .pushbuf_bytes = 64 << 10 };

	assert_int_equal(vgpu_channel_create(w.vf, w.as, &o, &w.ch[k]), 0);
}

/* ---- the work: CPU inputs, pushbuffers, CPU reference ---- */

static float x_of(uint32_t j)
{
	return (float)(j % 7 + 1);
}

static float y0_of(uint32_t i, uint32_t j)
{
	return (float)((i * 13 + j) % 1000);
}

static uint32_t u_of(uint32_t i)
{
	return 0x1000u + i * 3;		/* the REDUCE input's value before submission i */
}

static uint32_t c_of(uint32_t i)
{
	return 0xc0de0000u + i;		/* the COPY source's value before submission i */
}

/* Inputs for one round: every result slot changed to something no correct run leaves. */
static void inputs_reset(void)
{
	float *y = w.y.cpu, *x = w.x.cpu;
	uint32_t *u = w.u.cpu, *s = w.src.cpu;

	for (uint32_t j = 0; j < ELEMS; j++) {
		x[j] = x_of(j);
		u[j] = u_of(0);
		s[j] = c_of(0);
	}
	for (uint32_t i = 0; i < SUBS; i++)
		for (uint32_t j = 0; j < ELEMS; j++)
			y[(uint64_t)i * ELEMS + j] = y0_of(i, j);
	memset(w.sums.cpu, 0xff, SUBS * 8);
	memset(w.dst.cpu, 0xee, BUF_BYTES * SUBS);
	*(volatile uint64_t *)w.sem.cpu = 0;
	*w.gate = 0;
}

/* Methods of submission @i on channel kind @k into @pb. The second half of the round waits
 * at the gate first (60 s at most), so it is certainly in flight across a reset. */
static void work_build(enum kind k, uint32_t i, struct vgpu_pb *pb)
{
	if (i == GATED)
		vgpu_pb_sem_acquire(pb, w.sem.va + 64, 1, VGPU_SEM_64, 60u * 1000 * 1000);
	switch (k) {
	case K_AXPY:
		vgpu_pb_axpy_f32(pb, w.x.va, w.y.va + i * BUF_BYTES, ELEMS, 2.0f);
		break;
	case K_REDUCE:
		vgpu_pb_reduce_add_u32(pb, w.u.va, ELEMS, w.sums.va + i * 8);
		vgpu_pb_fill(pb, w.u.va, BUF_BYTES, u_of(i + 1));
		break;
	case K_COPY:
		vgpu_pb_copy(pb, w.src.va, w.dst.va + i * BUF_BYTES, BUF_BYTES);
		vgpu_pb_fill(pb, w.src.va, BUF_BYTES, c_of(i + 1));
		break;
	default:
		vgpu_pb_sem_acquire(pb, w.sem.va, i, VGPU_SEM_64 | VGPU_SEM_EQ, 0);
		vgpu_pb_sem_release(pb, w.sem.va, i + 1, VGPU_SEM_64);
		break;
	}
}

/* Whether submission @i of kind @k left exactly the CPU's result; says what differs. */
static bool work_check(enum kind k, uint32_t i)
{
	const float *y = (const float *)w.y.cpu + (uint64_t)i * ELEMS;
	const uint32_t *d = (const uint32_t *)w.dst.cpu + (uint64_t)i * ELEMS;
	uint64_t sum = ((const uint64_t *)w.sums.cpu)[i];

	switch (k) {
	case K_AXPY:
		for (uint32_t j = 0; j < ELEMS; j++) {
			float want = 2.0f * x_of(j) + y0_of(i, j);

			if (y[j] != want) {
				print_message("AXPY %u: y[%u] = %g, CPU %g\n", i, j, y[j], want);
				return false;
			}
		}
		return true;
	case K_REDUCE:
		if (sum != (uint64_t)u_of(i) * ELEMS)
			print_message("REDUCE %u: %#llx, CPU %#llx\n", i, (unsigned long long)sum,
				      (unsigned long long)u_of(i) * ELEMS);
		return sum == (uint64_t)u_of(i) * ELEMS;
	case K_COPY:
		for (uint32_t j = 0; j < ELEMS; j++) {
			if (d[j] != c_of(i)) {
				print_message("COPY %u: word %u = %#x, CPU %#x\n", i, j, d[j], c_of(i));
				return false;
			}
		}
		return true;
	default:
		return true;	/* its own fence is the counter's check: see round_check() */
	}
}

static void round_submit(void)
{
	for (uint32_t i = 0; i < SUBS; i++) {
		for (enum kind k = 0; k < K_NR; k++) {
			uint32_t dw[32];
			struct vgpu_pb pb;
			int ret;

			vgpu_pb_init(&pb, dw, 32);
			work_build(k, i, &pb);
			assert_int_equal(pb.err, 0);
			ret = vgpu_submit(w.ch[k], pb.dw, pb.len, &w.fence[k][i]);
			w.submitted[k][i] = !ret;
			if (ret != -VGPU_ECHANERR)	/* an error is what the round then checks */
				assert_int_equal(ret, 0);
		}
	}
}

/* Each fence: completed with the CPU's result, or its channel in a visible error. */
static void round_check(void)
{
	for (enum kind k = 0; k < K_NR; k++) {
		bool err = false;

		for (uint32_t i = 0; i < SUBS; i++) {
			int ret = w.submitted[k][i] ? vgpu_fence_wait(&w.fence[k][i], 0) : -VGPU_ECHANERR;

			if (ret == -VGPU_ECHANERR) {
				uint32_t code = 0;

				assert_int_equal(vgpu_channel_error(w.ch[k], &code, NULL), -VGPU_ECHANERR);
				assert_true(code != VGPU_CHAN_OK && code < VGPU_CHAN_ERR_NR);
				err = true;
				continue;
			}
			assert_int_equal(ret, 0);	/* neither completed nor errored: lost work */
			if (!work_check(k, i))
				fail_msg("%s submission %u: fence signalled, result wrong", kind_name[k], i);
			w.completed++;
		}
		if (k == K_SEM && !err)
			assert_int_equal(*(volatile uint64_t *)w.sem.cpu, SUBS);
		if (err) {	/* the guest's recovery: a new channel */
			w.errored++;
			vgpu_channel_destroy(w.ch[k]);
			chan_new(k);
		}
	}
}

static unsigned int busy_count(void)
{
	unsigned int n = 0;

	for (enum kind k = 0; k < K_NR; k++)
		for (uint32_t i = 0; i < SUBS; i++)
			n += w.submitted[k][i] && !vgpu_fence_done(&w.fence[k][i]);
	return n;
}

static void setup_work(void)
{
	struct vgpu_vf_opts vo = { .socket = vfx_group.sock, .quiet = true };

	memset(&w, 0, sizeof(w));
	w.next_va = 1ull << 32;
	assert_int_equal(vfx_vf_open(&vo, &w.vf), 0);
	assert_int_equal(vgpu_vaspace_create(w.vf, &w.as), 0);
	buf_new(&w.x, BUF_BYTES);
	buf_new(&w.y, BUF_BYTES * SUBS);
	buf_new(&w.u, BUF_BYTES);
	buf_new(&w.sums, PS);
	buf_new(&w.src, BUF_BYTES);
	buf_new(&w.dst, BUF_BYTES * SUBS);
	buf_new(&w.sem, PS);
	w.gate = (volatile uint64_t *)((char *)w.sem.cpu + 64);
	for (enum kind k = 0; k < K_NR; k++)
		chan_new(k);
}

static void teardown_work(void)
{
	for (enum kind k = 0; k < K_NR; k++)
		vgpu_channel_destroy(w.ch[k]);
	buf_del(&w.x);
	buf_del(&w.y);
	buf_del(&w.u);
	buf_del(&w.sums);
	buf_del(&w.src);
	buf_del(&w.dst);
	buf_del(&w.sem);
	vgpu_vaspace_destroy(w.as);
	vfx_vf_close(w.vf);
}

/* KILLS rounds: submit, kill vgpu-gsp -9 while the first half of the work runs and the
 * second half waits at the gate, open the gate once the reset's replay is done, check every
 * fence. A round without a kill first shows the workload itself is right. */
static void test_gsp_kill(void **state)
{
	pid_t daemon = vfx_group.fx.daemon, gsp;
	long resets;

	(void)state;
	vfx_skip_if_down();
	setup_work();
	inputs_reset();
	round_submit();
	*w.gate = 1;
	round_check();
	gsp = gsp_pid(daemon);
	assert_true(gsp > 0);
	resets = device_resets();
	assert_true(resets >= 0);
	for (int n = 0; n < KILLS; n++) {
		inputs_reset();
		round_submit();
		w.in_flight_at_kill += busy_count();
		assert_int_equal(kill(gsp, SIGKILL), 0);
		gsp = gsp_wait_other(daemon, gsp);
		assert_true(gsp > 0);
		resets_reach(++resets);
		w.across_reset += busy_count();		/* the gated half at least */
		*w.gate = 1;
		round_check();
	}
	assert_true(w.across_reset >= KILLS * K_NR * (SUBS - GATED));
	print_message("%d kills: %u fences completed right, %u channels in a visible error; "
		      "%u submissions running at the kills, %u still to run after the replay\n",
		      KILLS, w.completed, w.errored, w.in_flight_at_kill, w.across_reset);
	teardown_work();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_gsp_kill, vfx_case_teardown),
	};

	return vfx_run_group(tests, VFX_ONE_VF(NULL), "/dev/shm/vgpu-gspkill", UUID, "vgpu-512M");
}

// SPDX-License-Identifier: MIT
/* vgpud's per-VF RM limits: derived from the slice type, set per slice with vgpuctl, shown
 * provisioned; a guest at its limit gets VGPU_EQUOTA through the mailbox and nothing else
 * changes; a gone guest's objects are freed in batches while the other VF is served. */
#include "pf_test.h"
#include <vgpu/rm.h>

#include "common/err.h"

#define U1	"11111111-1111-4111-8111-111111111111"
#define U2	"22222222-2222-4222-8222-222222222222"
#define U3	"33333333-3333-4333-8333-333333333333"
#define T_OBJS	1000	/* VF 1's object limit: many teardown batches */

static int setup(void **state)
{
	struct tdaemon *d = t_daemon_new();

	*state = d;
	if (t_daemon_start(d, "--vram", "2G", "--max-vfs", "4", "--spare-vram", "256M", NULL))
		return -1;
	if (T_CTL(d, "set-vfs", "2") ||
	    T_CTL(d, "define", "-t", "vgpu-512M", "-u", U1, "--rm-clients", "2",
		  "--rm-objects", "1000") ||
	    T_CTL(d, "define", "-t", "vgpu-512M", "-u", U2) ||
	    T_CTL(d, "start", "-u", U1) || T_CTL(d, "start", "-u", U2))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	t_daemon_free(*state);
	return 0;
}

static void vf_sock(struct tdaemon *d, unsigned int vf, char *buf, size_t len)
{
	snprintf(buf, len, "%s/vf%u.sock", d->run, vf);
}

/* A new RM client; the reply's status (its handle in *@hc). */
static int rm_client(struct tguest *g, uint32_t *hc)
{
	struct vgpu_rm_msg m = {
		.magic = (uint32_t)VGPU_RM_MSG_MAGIC, .abi_version = VGPU_ABI_VERSION,
		.op = VGPU_RM_OP_ALLOC_CLIENT, .length = sizeof(m), .cookie = 1,
	};
	struct vgpu_rm_reply rp;
	uint32_t got = 0;

	assert_int_equal(t_guest_call(g, VF_MSG_RM, &m, sizeof(m), &rp, sizeof(rp), &got), 0);
	assert_true(got >= sizeof(rp));
	*hc = rp.handle;
	return rp.status;
}

/* An object of @cls (no parameters) under @parent; the reply's status (its handle in
 * *@h). */
static int rm_obj(struct tguest *g, uint32_t hc, uint32_t parent, uint32_t cls, uint32_t *h)
{
	struct vgpu_rm_alloc a = {
		.hdr = { .magic = (uint32_t)VGPU_RM_MSG_MAGIC, .abi_version = VGPU_ABI_VERSION,
			 .op = VGPU_RM_OP_ALLOC, .length = sizeof(a), .cookie = 2 },
		.h_client = hc, .h_parent = parent, .h_class = cls,
	};
	struct vgpu_rm_reply rp;
	uint32_t got = 0;

	assert_int_equal(t_guest_call(g, VF_MSG_RM, &a, sizeof(a), &rp, sizeof(rp), &got), 0);
	assert_true(got >= sizeof(rp));
	*h = rp.handle;
	return rp.status;
}

/* VF @vf's RM clients plus objects, from query-stats. */
static uint64_t vf_objects(struct tclient *c, int vf)
{
	json_object *args = json_object_new_object(), *rep, *arr, *rpc;
	uint64_t n;

	json_object_object_add(args, "vf", json_object_new_int(vf));
	rep = t_exec(c, "query-stats", args);
	assert_true(json_object_object_get_ex(t_ret(rep), "vfs", &arr));
	assert_true(json_object_object_get_ex(json_object_array_get_idx(arr, 0), "rpc", &rpc));
	n = t_get_u64(rpc, "rm_objects");
	json_object_put(rep);
	return n;
}

static json_object *provisioned(struct tdaemon *d, const char *uuid)
{
	json_object *o, *arr, *p;

	assert_int_equal(T_CTL(d, "list", "-u", (char *)uuid, "--json"), 0);
	o = t_out_json();
	assert_true(json_object_object_get_ex(o, "slices", &arr));
	assert_true(json_object_object_get_ex(json_object_array_get_idx(arr, 0), "provisioned", &p));
	json_object_get(p);
	json_object_put(o);
	return p;
}

/* The type's limits, a slice's own, and bad values refused naming the field. */
static void test_limits_provisioned(void **state)
{
	struct tdaemon *d = *state;
	json_object *p;

	p = provisioned(d, U1);
	assert_int_equal(t_get_u64(p, "rm_clients"), 2);
	assert_int_equal(t_get_u64(p, "rm_objects"), T_OBJS);
	json_object_put(p);
	p = provisioned(d, U2);
	assert_int_equal(t_get_u64(p, "rm_clients"), 64);
	assert_int_equal(t_get_u64(p, "rm_objects"), 4096);	/* the floor for 512 MiB */
	json_object_put(p);
	/* Out of range: a usage error naming the flag and its range, vgpud not asked. */
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-512M", "-u", U3, "--rm-objects", "0"), 2);
	assert_non_null(strstr(t_out.err, "--rm-objects \"0\": need a number in 1..1048576"));
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-512M", "-u", U3, "--channels", "0"), 2);
	assert_non_null(strstr(t_out.err, "--channels \"0\": need a number in 1..64"));
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-512M", "-u", U3, "--rm-clients", "5000"),
			 2);
	assert_int_equal(T_CTL(d, "list", "-u", U3), 3);	/* nothing was defined */
}

/* A guest at its limits gets VGPU_EQUOTA and nothing changes; when it goes, its objects
 * are freed in many batches, and the other VF is served meanwhile. */
static void test_guest_at_limit(void **state)
{
	struct tdaemon *d = *state;
	struct tguest g1, g2;
	struct tclient *cl = t_client(d, true);
	uint32_t hc[3], hd, hc2, hd2, h;
	uint64_t before;
	char path[256];
	unsigned int n;
	int r = 0;

	vf_sock(d, 1, path, sizeof(path));
	assert_int_equal(t_guest_attach(path, &g1), 0);
	assert_int_equal(rm_client(&g1, &hc[0]), 0);
	assert_int_equal(rm_client(&g1, &hc[1]), 0);
	assert_int_equal(rm_client(&g1, &hc[2]), -VGPU_EQUOTA);
	assert_int_equal(rm_obj(&g1, hc[0], hc[0], VGPU_RM_CLASS_DEVICE, &hd), 0);
	/* subdevices until the limit: every object counts, the device too */
	for (n = 1; n <= T_OBJS && !(r = rm_obj(&g1, hc[0], hd, VGPU_RM_CLASS_SUBDEVICE, &h)); n++)
		;
	assert_int_equal(r, -VGPU_EQUOTA);
	assert_int_equal(n, T_OBJS);
	before = vf_objects(cl, 1);
	assert_int_equal(before, 2 + T_OBJS);
	/* the other client is at the same limit; nothing was added */
	assert_int_equal(rm_obj(&g1, hc[1], hc[1], VGPU_RM_CLASS_DEVICE, &h), -VGPU_EQUOTA);
	assert_int_equal(vf_objects(cl, 1), before);
	/* VF 2 has its own limits */
	vf_sock(d, 2, path, sizeof(path));
	assert_int_equal(t_guest_attach(path, &g2), 0);
	assert_int_equal(rm_client(&g2, &hc2), 0);
	assert_int_equal(rm_obj(&g2, hc2, hc2, VGPU_RM_CLASS_DEVICE, &hd2), 0);
	/* guest 1 goes: its objects are freed in batches from the loop; guest 2 is served
	 * (and the control socket answers) until VF 1 is empty */
	t_guest_detach(&g1);
	n = 0;
	while (vf_objects(cl, 1)) {
		assert_int_equal(rm_obj(&g2, hc2, hd2, VGPU_RM_CLASS_SUBDEVICE, &h), 0);
		assert_true(++n < 100000);
	}
	assert_true(t_status_u64(cl, "rm_teardown_batches") >= T_OBJS / 64);
	assert_int_equal(vf_objects(cl, 2), 2 + n);
	t_guest_detach(&g2);
	t_client_free(cl);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_limits_provisioned, setup, teardown),
		cmocka_unit_test_setup_teardown(test_guest_at_limit, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

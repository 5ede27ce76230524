// SPDX-License-Identifier: MIT
/* The kernel-driver transport without the kernel driver: what a host or a VM without
 * vgpu_vf.ko gets (no device, a device file that is not the driver's), and the refusals of
 * the kmod-only calls on another transport. The driver itself is tested inside a VM
 * (tests/vm/qemu-kmod.sh). */
#include <errno.h>
#include <glob.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/include/vgpu_vf_kmod.h"
#include "vf_guest/vf_pci.h"
#include <vgpu/vf_bar.h>

/* Whether this machine has the driver's device nodes (a VM with vgpu_vf.ko loaded). */
static bool have_driver(void)
{
	glob_t g;
	bool any = glob("/dev/vgpu-vf*", 0, NULL, &g) == 0;

	globfree(&g);
	return any;
}

static void test_no_device(void **state)
{
	struct vgpu_vf_transport *t = NULL;
	char longp[5000];

	(void)state;
	if (have_driver())
		skip();
	assert_int_equal(vgpu_vf_transport_kmod(NULL, &t), -ENODEV);
	assert_null(t);
	assert_int_equal(vgpu_vf_transport_kmod("/nonexistent/vgpu-vf1", &t), -ENODEV);
	assert_null(t);
	memset(longp, 'a', sizeof(longp) - 1);
	longp[0] = '/';
	longp[sizeof(longp) - 1] = '\0';
	assert_int_equal(vgpu_vf_transport_kmod(longp, &t), -ENAMETOOLONG);
	assert_null(t);
}

/* A device file that is not the driver's: attach fails on its first ioctl, leaves nothing
 * open, and every operation says the host is not there. */
static void test_not_the_driver(void **state)
{
	struct vgpu_vf_transport *t = NULL;
	uint64_t size = 0;
	void *bar = NULL;

	(void)state;
	assert_int_equal(vgpu_vf_transport_kmod("/dev/null", &t), 0);
	assert_non_null(t);
	assert_true(vf_kmod_is(t));
	assert_string_equal(t->ops->name, "kmod");
	assert_int_equal(t->ops->attach(t, &bar, &size), -ENOTTY);
	assert_null(bar);
	assert_false(t->ops->alive(t));
	assert_int_equal(t->ops->nr_vectors(t), 0);
	assert_int_equal(t->ops->notify(t, VF_VEC_MBOX), -ENOLINK);
	assert_int_equal(t->ops->wait(t, VF_VEC_GPU, 1000), -ENOLINK);
	assert_int_equal(vf_kmod_bar2_view(t, 0, 4096, NULL, &bar), -EINVAL);
	t->ops->detach(t);
	t->ops->destroy(t);
}

/* The kmod-only calls refuse another transport and a VF that is not the driver's. */
static void test_other_transport(void **state)
{
	struct vgpu_vf_transport *t = NULL;
	uint64_t moved = 7, where[1];
	void *view = NULL;
	char buf[4096];

	(void)state;
	assert_int_equal(vgpu_vf_transport_local("/nonexistent.sock", &t), 0);
	assert_false(vf_kmod_is(t));
	assert_false(vf_kmod_is(NULL));
	assert_int_equal(vf_kmod_bar2_view(t, 0, 4096, NULL, &view), -EINVAL);
	assert_null(view);
	t->ops->destroy(t);
	assert_int_equal(vgpu_kmod_svm_migrate(NULL, buf, sizeof(buf), true, &moved), -EOPNOTSUPP);
	assert_int_equal(moved, 7);
	assert_int_equal(vgpu_kmod_svm_where(NULL, buf, 1, where), -EOPNOTSUPP);
}

/* The kernel address-space calls refuse a VF that is not attached through the driver and
 * leave their outputs alone. */
static void test_as_other_transport(void **state)
{
	struct vgpu_channel *ch = (struct vgpu_channel *)&ch;
	struct vgpu_kmod_as_stats s = { .faults = 9 };

	(void)state;
	assert_int_equal(vgpu_kmod_as_create(NULL), -EOPNOTSUPP);
	assert_int_equal(vgpu_kmod_channel_create(NULL, 0, &ch), -EOPNOTSUPP);
	assert_ptr_equal(ch, (struct vgpu_channel *)&ch);
	assert_int_equal(vgpu_kmod_as_stats(NULL, &s), -EOPNOTSUPP);
	assert_int_equal(s.faults, 9);
	assert_null(vgpu_kmod_device(NULL));
	vgpu_kmod_channel_destroy(NULL);
}

/* The quota and AS_MAP calls refuse a VF that is not attached through the driver and leave
 * their outputs alone. */
static void test_quota_map_other_transport(void **state)
{
	struct vgpu_kmod_quota q = { .vram_limit = 5 };

	(void)state;
	assert_int_equal(vgpu_kmod_quota(NULL, &q), -EOPNOTSUPP);
	assert_int_equal(q.vram_limit, 5);
	assert_int_equal(vgpu_kmod_as_map(NULL, NULL, 1ull << 47, false), -EOPNOTSUPP);
	assert_int_equal(vgpu_kmod_as_unmap(NULL, 1ull << 47), -EOPNOTSUPP);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_device),
		cmocka_unit_test(test_not_the_driver),
		cmocka_unit_test(test_other_transport),
		cmocka_unit_test(test_as_other_transport),
		cmocka_unit_test(test_quota_map_other_transport),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

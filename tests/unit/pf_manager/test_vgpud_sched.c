// SPDX-License-Identifier: MIT
/* Scheduling settings through vgpud and vgpuctl: slice lengths in microseconds (the
 * millisecond flags and attributes are the same setting in whole ms), vgpud's device slice
 * from its flag, and out-of-range values refused with their range named and nothing
 * changed, from vgpuctl and from a raw control request. */
#include "common/compiler.h"
#include "pf_test.h"

#define U1 "11111111-1111-4111-8111-111111111111"

static int setup(void **state)
{
	struct tdaemon *d = t_daemon_new();

	*state = d;
	return t_daemon_start(d, "--vram", "4G", "--max-vfs", "4", "--spare-vram", "512M",
			      "--sched-quantum-us", "250", NULL);
}

static int teardown(void **state)
{
	return t_teardown(state);
}

/* U1's provisioned (running) or custom quota field @key, through list --json. */
static uint64_t prov_u64(struct tdaemon *d, const char *key)
{
	json_object *o, *arr, *s, *p;
	uint64_t v;

	assert_int_equal(T_CTL(d, "list", "-u", U1, "--json"), 0);
	o = t_out_json();
	assert_true(json_object_object_get_ex(o, "slices", &arr));
	s = json_object_array_get_idx(arr, 0);
	assert_true(json_object_object_get_ex(s, "provisioned", &p));
	v = t_get_u64(p, key);
	json_object_put(o);
	return v;
}

/* The device slice from --sched-quantum-us, reported by status. */
static void test_device_quantum_us(void **state)
{
	struct tdaemon *d = *state;
	struct tclient *c = t_client(d, true);

	assert_int_equal(t_status_u64(c, "sched_quantum_us"), 250);
	t_client_free(c);
}

/* A slice's length set in us, or in ms as the alias, is provisioned in us. */
static void test_slice_quantum_us(void **state)
{
	struct tdaemon *d = *state;

	assert_int_equal(T_CTL(d, "set-vfs", "2"), 0);
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-1G", "-u", U1, "--exec-quantum-us", "250",
			       "--preempt-timeout-us", "500"), 0);
	assert_int_equal(T_CTL(d, "start", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "exec quantum 250 us, preempt timeout 500 us"));
	assert_int_equal(prov_u64(d, "exec_quantum_us"), 250);
	assert_int_equal(prov_u64(d, "exec_quantum_ms"), 1);	/* rounded up */
	assert_int_equal(prov_u64(d, "preempt_timeout_us"), 500);
	assert_int_equal(T_CTL(d, "stop", "-u", U1), 0);
	assert_int_equal(T_CTL(d, "modify", "-u", U1, "--exec-quantum-ms", "3"), 0);
	assert_int_equal(T_CTL(d, "start", "-u", U1), 0);
	assert_int_equal(prov_u64(d, "exec_quantum_us"), 3000);
	assert_int_equal(prov_u64(d, "exec_quantum_ms"), 3);
}

static const struct bad_flag {
	const char *flag, *value, *range;
} bad_flags[] = {
	{ "--exec-quantum-us", "100000001", "0..100000000" },
	{ "--exec-quantum-ms", "100001", "0..100000" },
	{ "--preempt-timeout-us", "10000001", "0..10000000" },
	{ "--exec-quantum-us", "-1", "0..100000000" },
};

static const struct bad_attr {
	const char *key;
	int64_t value;
	const char *range;
} bad_attrs[] = {
	{ "exec_quantum_us", 100000001, "0..100000000" },
	{ "exec_quantum_ms", 100001, "0..100000" },
	{ "preempt_timeout_us", 10000001, "0..10000000" },
};

/* Out of range, from vgpuctl (checked before sending) and in a raw modify-slice (checked by
 * the daemon): an error that names the flag or key and its range; the slice, the list and
 * the status are what they were. */
static void test_out_of_range_changes_nothing(void **state)
{
	struct tdaemon *d = *state;
	struct tclient *c;
	char *before, *after;

	assert_int_equal(T_CTL(d, "set-vfs", "2"), 0);
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-1G", "-u", U1, "--exec-quantum-us", "400"),
			 0);
	c = t_client(d, true);
	before = t_snapshot(c);
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(bad_flags); i++) {
		const struct bad_flag *b = &bad_flags[i];

		assert_int_equal(T_CTL(d, "modify", "-u", U1, (char *)b->flag, (char *)b->value), 2);
		assert_non_null(strstr(t_out.err, b->flag));
		assert_non_null(strstr(t_out.err, b->range));
	}
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(bad_attrs); i++) {
		json_object *a = t_args("uuid", U1), *attrs = json_object_new_array(), *kv, *rep, *e,
			    *desc;

		kv = json_object_new_object();
		json_object_object_add(kv, bad_attrs[i].key, json_object_new_int64(bad_attrs[i].value));
		json_object_array_add(attrs, kv);
		json_object_object_add(a, "attrs", attrs);
		rep = t_exec(c, "modify-slice", a);
		assert_string_equal(t_err_class(rep), "InvalidArgument");
		assert_true(json_object_object_get_ex(rep, "error", &e));
		assert_true(json_object_object_get_ex(e, "desc", &desc));
		assert_non_null(strstr(json_object_get_string(desc), bad_attrs[i].key));
		assert_non_null(strstr(json_object_get_string(desc), bad_attrs[i].range));
		json_object_put(rep);
	}
	after = t_snapshot(c);
	assert_string_equal(before, after);
	free(before);
	free(after);
	t_client_free(c);
	assert_int_equal(T_CTL(d, "start", "-u", U1), 0);
	assert_int_equal(prov_u64(d, "exec_quantum_us"), 400);
}

/* vgpud refuses a device slice out of range, naming the flag. */
static void test_daemon_quantum_range(void **state)
{
	struct tdaemon *d = t_daemon_new();

	(void)state;
	assert_int_not_equal(t_daemon_start(d, "--vram", "4G", "--sched-quantum-us", "10000001",
					    NULL), 0);
	t_daemon_free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_device_quantum_us, setup, teardown),
		cmocka_unit_test_setup_teardown(test_slice_quantum_us, setup, teardown),
		cmocka_unit_test_setup_teardown(test_out_of_range_changes_nothing, setup, teardown),
		cmocka_unit_test(test_daemon_quantum_range),
	};

	return cmocka_run_group_tests_name("vgpud_sched", tests, NULL, NULL);
}

// SPDX-License-Identifier: MIT
/* A guest holds its BAR object and may shrink it (ftruncate): vgpud's next access past the
 * new end faults. With a real vgpud: the object of VF 1 cut to nothing under a reset (the
 * loop thread rewrites the control area) and under an engine polling a semaphore in VRAM
 * (an engine thread reads it); either way vgpud lives on, stops that slice alone (event
 * SLICE_STOPPED), keeps VF 2's running, and starts VF 1's again whole. */
/* pf_test.h copies paths it made itself into sun_path; gcc cannot see their length. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include "pf_mig_test.h"

#define U1	"c0ffee00-1111-4111-8111-111111111111"
#define U2	"c0ffee00-2222-4222-8222-222222222222"

static struct tdaemon *dmn;

static int setup(void **state)
{
	(void)state;
	return t_setup_two_vfs(&dmn, U1, U2);
}

/* The next SLICE_STOPPED event on @c; it names @uuid. */
static void wait_stopped(struct tclient *c, const char *uuid)
{
	for (;;) {
		json_object *o = t_read_json(c, -1), *ev, *data, *u;

		if (!o)
			fail_msg("vgpud closed the connection before SLICE_STOPPED");
		if (json_object_object_get_ex(o, "event", &ev) &&
		    !strcmp(json_object_get_string(ev), "SLICE_STOPPED")) {
			assert_true(json_object_object_get_ex(o, "data", &data));
			assert_true(json_object_object_get_ex(data, "uuid", &u));
			assert_string_equal(json_object_get_string(u), uuid);
			json_object_put(o);
			return;
		}
		json_object_put(o);
	}
}

/* VF 1's object cut to nothing by another holder. */
static void cut_vf1(void)
{
	int fd = t_bar_open(dmn, 1);

	assert_int_equal(ftruncate(fd, 0), 0);
	close(fd);
}

/* U1 stopped, U2 running, vgpud serving; U1 starts again on a whole object. */
static void only_u1_stopped(void)
{
	struct stat st;
	int fd;

	assert_int_equal(T_CTL(dmn, "list", "-u", U1), 0);
	assert_null(strstr(t_out.out, "running"));
	assert_int_equal(T_CTL(dmn, "list", "-u", U2), 0);
	assert_non_null(strstr(t_out.out, "running"));
	assert_int_equal(T_CTL(dmn, "start", "-u", U1), 0);
	fd = t_bar_open(dmn, 1);
	assert_int_equal(fstat(fd, &st), 0);
	assert_true(st.st_size > 512 << 20);
	close(fd);
}

/* A reset formats the control area from the loop thread (unless another access of vgpud
 * to the control area came first and the slice is stopped already: not running, exit 3). */
static void test_cut_under_reset(void **state)
{
	struct tclient *ev = t_client(dmn, true);
	int rc;

	(void)state;
	cut_vf1();
	rc = T_CTL(dmn, "reset", "-u", U1);
	assert_true(rc == 0 || rc == 3);
	wait_stopped(ev, U1);
	t_client_free(ev);
	only_u1_stopped();
}

/* An engine polls a semaphore in VRAM that nobody releases; the object goes under it. */
static void test_cut_under_engine(void **state)
{
	struct tclient *ev = t_client(dmn, true);
	struct tvf g = { 0 };
	char ep[200];
	uint32_t dw[64];
	struct vgpu_pb pb;

	(void)state;
	snprintf(ep, sizeof(ep), "%s/vf1.master.sock", dmn->run);
	t_vf_up(&g, ep);
	t_vf_fill(&g, 0, 0, 0);
	vgpu_pb_init(&pb, dw, 64);
	vgpu_pb_sem_acquire(&pb, T_VF_VA, 5, 0, 60000000);
	assert_int_equal(pb.err, 0);
	assert_int_equal(vgpu_submit(g.ch[0], pb.dw, pb.len, &g.last[0]), 0);
	cut_vf1();
	wait_stopped(ev, U1);
	t_client_free(ev);
	t_vf_down(&g);
	only_u1_stopped();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_cut_under_reset, setup, t_teardown),
		cmocka_unit_test_setup_teardown(test_cut_under_engine, setup, t_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/* What the vgpu-vm suites (test_vgpu_vm, test_vgpu_vm_ux) share: the vgpu-vm program of this
 * build run against the suite's vgpud (pf_test.h's daemon), its output captured. */
#ifndef VGPU_TESTS_VMM_GLUE_VGPU_VM_TEST_H
#define VGPU_TESTS_VMM_GLUE_VGPU_VM_TEST_H

#include "../pf_manager/pf_test.h"

/* One run's exit code (128 + the signal for a killed one) and output. */
struct vm_run {
	int rc;
	char out[65536], err[16384];
};

/* vgpu-vm with @argv (after the program name) talking to the vgpud at @sock ($VGPUD_SOCKET;
 * NULL: unset, so the domain metadata's socket is the one); its stdout and stderr pipes in
 * *@out_fd and *@err_fd, and its stdin a pipe in *@in_fd (NULL: it keeps ours). */
static inline pid_t vm_spawn(const char *sock, char *const *argv, int *in_fd, int *out_fd,
			     int *err_fd)
{
	int po[2], pe[2], pi[2] = { -1, -1 };
	char *args[48];
	int n = 0;
	pid_t pid;

	args[n++] = (char *)t_bin("vgpu-vm");
	for (int i = 0; argv[i] && n < 47; i++)
		args[n++] = argv[i];
	args[n] = NULL;
	assert_int_equal(pipe(po), 0);
	assert_int_equal(pipe(pe), 0);
	if (in_fd)
		assert_int_equal(pipe(pi), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		if (in_fd) {
			dup2(pi[0], 0);
			close(pi[1]);
		}
		dup2(po[1], 1);
		dup2(pe[1], 2);
		close(po[0]);
		close(pe[0]);
		if (sock)
			setenv("VGPUD_SOCKET", sock, 1);
		else
			unsetenv("VGPUD_SOCKET");
		execv(args[0], args);
		_exit(127);
	}
	if (in_fd) {
		close(pi[0]);
		*in_fd = pi[1];
	}
	close(po[1]);
	close(pe[1]);
	*out_fd = po[0];
	*err_fd = pe[0];
	return pid;
}

/* Wait for the vgpu-vm @pid, its output read from @out_fd and @err_fd (closed), into @r. */
static inline void vm_finish(pid_t pid, int out_fd, int err_fd, struct vm_run *r)
{
	int st;

	t_read_all(out_fd, r->out, sizeof(r->out));
	t_read_all(err_fd, r->err, sizeof(r->err));
	close(out_fd);
	close(err_fd);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	r->rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#endif

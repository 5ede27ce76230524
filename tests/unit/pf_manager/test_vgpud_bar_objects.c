// SPDX-License-Identifier: MIT
/* The BAR objects a restarted vgpud adopts by name belong to tenants meanwhile: a guest
 * holds its own (it may grow it, cut it, lease it, link another name to it or link another
 * object under its name) and any local user may put a file under one of the names, which
 * are public. Whatever is there, the restart completes (the start
 * returning is the proof: none of these waits on a clock) and only the slice whose object
 * is wrong comes back stopped, with a warning naming the object and why; the other slice
 * runs on. A grown object is cut back and adopted with its VRAM; what vgpud did not make
 * is left where it is. The journal records each object's inode: another object under a
 * slice's name is refused, the recorded one adopted whatever other names it has; a journal
 * of an older vgpud, without the record, refuses an object with more than one link. */
#include "pf_test.h"

#define U1	"ba40b1ec-1111-4111-8111-111111111111"
#define U2	"ba40b1ec-2222-4222-8222-222222222222"
#define NOBODY	65534
#define MARK	"bar-objects-marker"
#define MARK2	"bar-objects-marker-of-u2"

static char *daemon_args[] = { "--vram", "2G", "--max-vfs", "4", "--num-vfs", "2",
			       "--spare-vram", "256M", NULL };

/* Start @d with its stderr in <root>/log (@log). */
static int start_logged(struct tdaemon *d, char *log, size_t len)
{
	return t_daemon_start_logged(d, daemon_args, log, len);
}

/* A daemon with U1 running on VF 1 (its VRAM marked) and U2 on VF 2, stopped again: the
 * objects and the journal stay for the next start. */
static struct tdaemon *ran_two(void)
{
	struct tdaemon *d = t_daemon_new();
	int fd = -1;
	char *p;

	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
	t_define_start(d, "vgpu-512M", U1);
	t_define_start(d, "vgpu-512M", U2);
	fd = t_bar_open(d, 1);
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(p != MAP_FAILED);
	memcpy(p, MARK, sizeof(MARK));
	munmap(p, 4096);
	close(fd);
	assert_int_equal(t_daemon_stop(d, SIGTERM), 0);
	return d;
}

/* The journal of @d as an older vgpud wrote it: no entry records its object's inode. */
static void journal_unrecorded(struct tdaemon *d)
{
	char path[256];
	json_object *j, *arr;

	snprintf(path, sizeof(path), "%s/journal.json", d->state);
	j = json_object_from_file(path);
	assert_non_null(j);
	assert_true(json_object_object_get_ex(j, "slices", &arr));
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		json_object *e = json_object_array_get_idx(arr, i);

		assert_true(json_object_object_get_ex(e, "bar_ino", NULL));
		assert_true(json_object_object_get_ex(e, "bar_dev", NULL));
		json_object_object_del(e, "bar_ino");
		json_object_object_del(e, "bar_dev");
	}
	assert_int_equal(json_object_to_file_ext(path, j, JSON_C_TO_STRING_PLAIN), 0);
	json_object_put(j);
}

/* The VF slice @uuid runs on, 0 if it is not running. */
static int slice_vf(struct tdaemon *d, const char *uuid)
{
	struct tclient *c = t_client(d, true);
	json_object *rep = t_exec(c, "query-slices", t_args("uuid", uuid)), *arr, *s, *v;
	int vf = 0;

	assert_true(json_object_object_get_ex(t_ret(rep), "slices", &arr));
	s = json_object_array_get_idx(arr, 0);
	assert_non_null(s);
	if (!strcmp(json_object_get_string(json_object_object_get(s, "state")), "running") &&
	    json_object_object_get_ex(s, "vf", &v))
		vf = json_object_get_int(v);
	json_object_put(rep);
	t_client_free(c);
	return vf;
}

/* U1 came back stopped, U2 running on VF 2, and U1 starts again on a new object. */
static void only_u1_stopped(struct tdaemon *d)
{
	assert_int_equal(slice_vf(d, U1), 0);
	assert_int_equal(slice_vf(d, U2), 2);
	assert_int_equal(T_CTL(d, "start", "-u", U1), 0);
	assert_int_equal(slice_vf(d, U1), 1);
}

/* Run @fn(@path) as nobody, as any local user can: /dev/shm is world-writable. */
static void as_nobody(int (*fn)(const char *), const char *path)
{
	pid_t pid = fork();
	int st;

	assert_true(pid >= 0);
	if (!pid) {
		if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY))
			_exit(99);
		_exit(fn(path) ? 1 : 0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

static int make_fifo(const char *path)
{
	return mkfifo(path, 0666);
}

/* A regular file the size of a 512 MiB slice's BAR, as the object was. */
static int make_file(const char *path)
{
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0666), r;

	if (fd < 0)
		return -1;
	r = ftruncate(fd, (off_t)vf_bar_size(512ull << 20, VF_BAR_DMA_DEFAULT));
	close(fd);
	return r;
}

/* Whether @path is a FIFO. */
static bool is_fifo(const char *path)
{
	struct stat sb;

	return !lstat(path, &sb) && S_ISFIFO(sb.st_mode);
}

/* Its guest grew the object (a bigger BAR is no BAR): cut back to its size, adopted with
 * its VRAM and handed back mode 0600 whatever the mode was. */
static void test_grown(void **state)
{
	struct tdaemon *d = ran_two();
	char log[200], path[128], buf[sizeof(MARK)];
	struct stat sb;
	off_t size;
	int fd;

	(void)state;
	fd = t_bar_open(d, 1);
	assert_int_equal(fstat(fd, &sb), 0);
	size = sb.st_size;
	assert_int_equal(ftruncate(fd, 2 * size), 0);
	assert_int_equal(fchmod(fd, 0666), 0);
	close(fd);
	assert_int_equal(start_logged(d, log, sizeof(log)), 0);
	assert_int_equal(slice_vf(d, U1), 1);
	assert_int_equal(slice_vf(d, U2), 2);
	t_bar_path(d, 1, path, sizeof(path));
	assert_true(t_log_has(log, path + strlen("/dev/shm")));
	assert_true(t_log_has(log, "had grown"));
	fd = t_bar_open(d, 1);
	assert_int_equal(fstat(fd, &sb), 0);
	assert_int_equal(sb.st_size, size);
	assert_int_equal(sb.st_mode & 0777, 0600);
	assert_int_equal(pread(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	assert_memory_equal(buf, MARK, sizeof(MARK));
	close(fd);
	t_daemon_free(d);
}

/* Its guest cut the object: that slice comes back stopped. */
static void test_cut(void **state)
{
	struct tdaemon *d = ran_two();
	char log[200];
	int fd;

	(void)state;
	fd = t_bar_open(d, 1);
	assert_int_equal(ftruncate(fd, 4096), 0);
	close(fd);
	assert_int_equal(start_logged(d, log, sizeof(log)), 0);
	assert_true(t_log_has(log, "has 4096 bytes, less than its BAR's"));
	assert_true(t_log_has(log, "the slice comes back stopped"));
	only_u1_stopped(d);
	t_daemon_free(d);
}

/* A FIFO where a running slice's object was (its owner or, once the object is gone, any
 * local user put it there): opening it would wait for a writer forever. That slice comes
 * back stopped; the FIFO, not vgpud's, stays. */
static void test_fifo_for_object(void **state)
{
	struct tdaemon *d = ran_two();
	char log[200], path[128];

	(void)state;
	t_bar_path(d, 1, path, sizeof(path));
	assert_int_equal(unlink(path), 0);
	as_nobody(make_fifo, path);
	assert_int_equal(start_logged(d, log, sizeof(log)), 0);
	assert_true(t_log_has(log, "is not a regular file but a FIFO; the slice comes back "
			    "stopped"));
	assert_true(t_log_has(log, "left alone"));
	assert_true(is_fifo(path));
	assert_int_equal(slice_vf(d, U1), 0);
	assert_int_equal(slice_vf(d, U2), 2);
	/* A start on that VF makes its object anew. */
	assert_int_equal(T_CTL(d, "start", "-u", U1), 0);
	assert_int_equal(slice_vf(d, U1), 1);
	assert_false(is_fifo(path));
	t_daemon_free(d);
}

/* A FIFO under the name of a VF no slice runs on, which the sweep of stray objects looks
 * at: the start completes, both slices run, the FIFO stays. */
static void test_fifo_stray(void **state)
{
	struct tdaemon *d = ran_two();
	char log[200], path[128];

	(void)state;
	t_bar_path(d, 3, path, sizeof(path));
	as_nobody(make_fifo, path);
	assert_int_equal(start_logged(d, log, sizeof(log)), 0);
	assert_int_equal(slice_vf(d, U1), 1);
	assert_int_equal(slice_vf(d, U2), 2);
	assert_true(is_fifo(path));
	assert_true(t_log_has(log, "a FIFO of uid 65534); left alone"));
	t_daemon_free(d);
}

/* A regular file of another uid in place of the object (with the right size): not
 * adopted, since its maker would share the slice's VRAM; left where it is. */
static void test_foreign_owner(void **state)
{
	struct tdaemon *d = ran_two();
	char log[200], path[128];
	struct stat sb;

	(void)state;
	t_bar_path(d, 1, path, sizeof(path));
	assert_int_equal(unlink(path), 0);
	as_nobody(make_file, path);
	assert_int_equal(start_logged(d, log, sizeof(log)), 0);
	assert_true(t_log_has(log, "is owned by uid 65534"));
	assert_int_equal(slice_vf(d, U1), 0);
	assert_int_equal(slice_vf(d, U2), 2);
	assert_int_equal(lstat(path, &sb), 0);
	assert_int_equal(sb.st_uid, NOBODY);
	t_daemon_free(d);
}

/* A write lease on the object (its owner can take one on the file it was given): a
 * blocking open would wait for the lease break (45 s). The open does not wait, and that
 * slice comes back stopped. */
static void test_lease(void **state)
{
	struct tdaemon *d = ran_two();
	char log[200];
	int fd;

	(void)state;
	/* The break's signal is the holder's business: ignored, the lease is just held. */
	signal(SIGIO, SIG_IGN);
	fd = t_bar_open(d, 1);
	assert_int_equal(fcntl(fd, F_SETLEASE, F_WRLCK), 0);
	assert_int_equal(start_logged(d, log, sizeof(log)), 0);
	assert_true(t_log_has(log, "is held by a lease"));
	assert_int_equal(slice_vf(d, U1), 0);
	assert_int_equal(slice_vf(d, U2), 2);
	close(fd);
	t_daemon_free(d);
}

/* Whether the object at @path holds @mark at offset 0. */
static bool holds(const char *path, const char *mark)
{
	char buf[64] = "";
	size_t len = strlen(mark) + 1;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	bool r;

	assert_true(fd >= 0);
	r = pread(fd, buf, len, 0) == (ssize_t)len && !memcmp(buf, mark, len);
	close(fd);
	return r;
}

/* A second name linked to a running slice's object (by root here; any user may with
 * fs.protected_hardlinks=0): the journal recorded the object, so it is that slice's
 * whatever names it has, and it is adopted with its VRAM. The second name is not one of
 * vgpud's and stays. */
static void test_extra_link(void **state)
{
	struct tdaemon *d = ran_two();
	char log[200], path[128], link2[140];

	(void)state;
	t_bar_path(d, 1, path, sizeof(path));
	snprintf(link2, sizeof(link2), "%s-link", path);
	assert_int_equal(link(path, link2), 0);
	assert_int_equal(start_logged(d, log, sizeof(log)), 0);
	assert_false(t_log_has(log, "links"));
	assert_int_equal(slice_vf(d, U1), 1);
	assert_int_equal(slice_vf(d, U2), 2);
	assert_true(holds(path, MARK));
	assert_true(holds(link2, MARK));
	t_daemon_free(d);		/* the prefix's sweep removes link2 */
}

/* The same with a journal of an older vgpud, which recorded no object: a name that is not
 * the slice's own may hold another tenant's object, so one with more than one link is not
 * adopted. That slice comes back stopped naming the link count; the other runs on, and the
 * second name keeps the VRAM. */
static void test_extra_link_unrecorded(void **state)
{
	struct tdaemon *d = ran_two();
	char log[200], path[128], link2[140];

	(void)state;
	journal_unrecorded(d);
	t_bar_path(d, 1, path, sizeof(path));
	snprintf(link2, sizeof(link2), "%s-link", path);
	assert_int_equal(link(path, link2), 0);
	assert_int_equal(start_logged(d, log, sizeof(log)), 0);
	assert_true(t_log_has(log, "has 2 links, not 1"));
	assert_true(t_log_has(log, "the slice comes back stopped"));
	assert_true(holds(link2, MARK));
	only_u1_stopped(d);
	assert_true(holds(link2, MARK));
	t_daemon_free(d);
}

/* U2's VRAM marked, then U1's guest, the owner of its object, unlinks it and links U2's
 * root-owned object under U1's name. @path2: U2's object. */
static void link_attack(struct tdaemon *d, char *path2, size_t len)
{
	char p1[128];
	int fd;

	t_bar_path(d, 1, p1, sizeof(p1));
	t_bar_path(d, 2, path2, len);
	fd = t_bar_open(d, 2);
	assert_int_equal(pwrite(fd, MARK2, sizeof(MARK2), 0), (ssize_t)sizeof(MARK2));
	close(fd);
	assert_int_equal(unlink(p1), 0);
	assert_int_equal(link(path2, p1), 0);
}

/* The attack above: U1's name now holds U2's object, with two links, which is not the
 * object the journal recorded for U1: U1 comes back stopped. U2 finds the object it ran
 * with and runs on with its VRAM; the sweep then unlinks the name U1's entry left (a
 * name, not the data U2 maps), and a second restart adopts U2's object again. */
static void test_other_object_linked(void **state)
{
	struct tdaemon *d = ran_two();
	char log[200], p1[128], p2[128];
	struct stat sb;

	(void)state;
	link_attack(d, p2, sizeof(p2));
	t_bar_path(d, 1, p1, sizeof(p1));
	assert_int_equal(start_logged(d, log, sizeof(log)), 0);
	assert_true(t_log_has(log, "is not the object this slice ran with"));
	assert_false(t_log_has(log, "links"));
	assert_int_equal(slice_vf(d, U1), 0);
	assert_int_equal(slice_vf(d, U2), 2);
	assert_int_equal(lstat(p1, &sb), -1);		/* swept */
	assert_int_equal(lstat(p2, &sb), 0);
	assert_int_equal(sb.st_nlink, 1);
	assert_true(holds(p2, MARK2));
	assert_int_equal(t_daemon_stop(d, SIGTERM), 0);
	assert_int_equal(start_logged(d, log, sizeof(log)), 0);
	assert_int_equal(slice_vf(d, U2), 2);
	assert_true(holds(p2, MARK2));
	assert_int_equal(T_CTL(d, "start", "-u", U1), 0);
	assert_int_equal(slice_vf(d, U1), 1);
	assert_true(holds(p2, MARK2));
	t_daemon_free(d);
}

/* The attack with a journal of an older vgpud, which recorded no object: which name is
 * the slice's own cannot be told from the object, so neither slice adopts it: both come
 * back stopped. */
static void test_other_object_linked_unrecorded(void **state)
{
	struct tdaemon *d = ran_two();
	char log[200], p2[128];

	(void)state;
	journal_unrecorded(d);
	link_attack(d, p2, sizeof(p2));
	assert_int_equal(start_logged(d, log, sizeof(log)), 0);
	assert_true(t_log_has(log, "has 2 links, not 1"));
	assert_int_equal(slice_vf(d, U1), 0);
	assert_int_equal(slice_vf(d, U2), 0);
	t_daemon_free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_grown, t_teardown),
		cmocka_unit_test_teardown(test_cut, t_teardown),
		cmocka_unit_test_teardown(test_fifo_for_object, t_teardown),
		cmocka_unit_test_teardown(test_fifo_stray, t_teardown),
		cmocka_unit_test_teardown(test_foreign_owner, t_teardown),
		cmocka_unit_test_teardown(test_lease, t_teardown),
		cmocka_unit_test_teardown(test_extra_link, t_teardown),
		cmocka_unit_test_teardown(test_extra_link_unrecorded, t_teardown),
		cmocka_unit_test_teardown(test_other_object_linked, t_teardown),
		cmocka_unit_test_teardown(test_other_object_linked_unrecorded, t_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

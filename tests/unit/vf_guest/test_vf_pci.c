// SPDX-License-Identifier: MIT
/* The in-VM device discovery and the sysfs (polling) transport, without a VM: a fake
 * /sys/bus/pci/devices tree in a temp dir, whose resource2 files are regular files holding a
 * BAR2 image with or without our magic (the sysfs tier maps resource2 the same way either
 * way). The last case attaches the driver through the sysfs tier to a real vgpud: resource2
 * is the slice's BAR2 object, and a "QEMU" thread forwards the fake BAR0 doorbell register
 * to vgpud as the ivshmem peer (the local transport). */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/compiler.h"
#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/vf_pci.h"
#include "vf_guest/vft/vft.h"
#include <vgpu/vf_bar.h>

#define BAR_1M		(1ull << 20)
#define SLICE_UUID	"7e570000-0000-4000-8000-00000000fc01"
#define DB_SENTINEL	0xffffffffu	/* the fake doorbell register when nothing was rung */

/* ---- the fake sysfs tree ---- */

struct fake_dev {
	const char *name;	/* NULL ends the list */
	unsigned int vendor, device;
	uint64_t bar_size;	/* 0: no resource2 file */
	bool magic;
	uint32_t nr_vectors;
};

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* A device directory: vendor, device, a 4 KiB resource0 (doorbell reads as the sentinel)
 * and a sparse resource2 with the header page at vf_bar_header_off(). */
static void fake_dev_make(const char *root, const struct fake_dev *d)
{
	char dir[PATH_MAX], path[PATH_MAX + 16], text[16];
	uint32_t regs[VF_PCI_BAR0_SIZE / 4];
	int fd;

	snprintf(dir, sizeof(dir), "%s/%s", root, d->name);
	assert_int_equal(mkdir(dir, 0755), 0);
	snprintf(text, sizeof(text), "0x%04x\n", d->vendor);
	write_file(dir, "vendor", text);
	snprintf(text, sizeof(text), "0x%04x\n", d->device);
	write_file(dir, "device", text);
	snprintf(path, sizeof(path), "%s/resource0", dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	memset(regs, 0, sizeof(regs));
	regs[VF_PCI_REG_DOORBELL / 4] = DB_SENTINEL;
	assert_int_equal(pwrite(fd, regs, sizeof(regs), 0), sizeof(regs));
	assert_int_equal(ftruncate(fd, 4096), 0);
	close(fd);
	if (!d->bar_size)
		return;
	snprintf(path, sizeof(path), "%s/resource2", dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)d->bar_size), 0);
	if (d->magic && d->bar_size >= VF_BAR_HDR_SIZE) {
		struct vf_bar_header h;

		memset(&h, 0, sizeof(h));
		h.magic = VF_BAR_MAGIC;
		h.nr_vectors = d->nr_vectors;
		h.bar_size = d->bar_size;
		assert_int_equal(pwrite(fd, &h, sizeof(h), (off_t)vf_bar_header_off(d->bar_size)),
				 sizeof(h));
	}
	close(fd);
}

static char *fake_root_new(const struct fake_dev *devs)
{
	char *root = strdup("/tmp/vgpu-vfpci-XXXXXX");

	assert_non_null(root);
	assert_non_null(mkdtemp(root));
	for (; devs && devs->name; devs++)
		fake_dev_make(root, devs);
	return root;
}

static void fake_root_free(char *root)
{
	char cmd[PATH_MAX + 16];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	assert_int_equal(system(cmd), 0);
	free(root);
}

/* ---- discovery: a table of trees ---- */

#define IVSHMEM		VF_PCI_VENDOR, VF_PCI_DEVICE
static const struct find_case {
	const char *name;
	struct fake_dev devs[4];
	const char *bdf;	/* asked for; NULL: the first that is ours */
	int want;
	const char *want_bdf;
} find_cases[] = {
	{ "ivshmem with the magic", { { "0000:00:03.0", IVSHMEM, BAR_1M, true, 3 } },
	  NULL, 0, "0000:00:03.0" },
	{ "ivshmem without the magic", { { "0000:00:03.0", IVSHMEM, BAR_1M, false, 3 } },
	  NULL, -ENODEV, NULL },
	{ "magic on another device id", { { "0000:00:03.0", VF_PCI_VENDOR, 0x1000, BAR_1M, true, 3 } },
	  NULL, -ENODEV, NULL },
	{ "magic on another vendor", { { "0000:00:03.0", 0x8086, VF_PCI_DEVICE, BAR_1M, true, 3 } },
	  NULL, -ENODEV, NULL },
	{ "no resource2", { { "0000:00:03.0", IVSHMEM, 0, false, 3 } }, NULL, -ENODEV, NULL },
	{ "resource2 not a power of two", { { "0000:00:03.0", IVSHMEM, 3 * BAR_1M, true, 3 } },
	  NULL, -ENODEV, NULL },
	{ "resource2 of one page", { { "0000:00:03.0", IVSHMEM, 4096, true, 3 } },
	  NULL, -ENODEV, NULL },
	{ "the one with the magic among three",
	  { { "0000:00:02.0", 0x1234, 0x1111, BAR_1M, false, 0 },
	    { "0000:00:03.0", IVSHMEM, BAR_1M, false, 3 },
	    { "0000:00:05.0", IVSHMEM, 2 * BAR_1M, true, 3 } }, NULL, 0, "0000:00:05.0" },
	{ "the first of two VFs", { { "0000:00:04.0", IVSHMEM, BAR_1M, true, 3 },
				    { "0000:00:06.0", IVSHMEM, BAR_1M, true, 3 } },
	  NULL, 0, "0000:00:04.0" },
	{ "a named VF", { { "0000:00:04.0", IVSHMEM, BAR_1M, true, 3 },
			  { "0000:00:06.0", IVSHMEM, BAR_1M, true, 3 } },
	  "0000:00:06.0", 0, "0000:00:06.0" },
	{ "a named device that is not ours", { { "0000:00:04.0", IVSHMEM, BAR_1M, true, 3 },
					       { "0000:00:06.0", IVSHMEM, BAR_1M, false, 3 } },
	  "0000:00:06.0", -ENODEV, NULL },
	{ "a named device that does not exist", { { "0000:00:04.0", IVSHMEM, BAR_1M, true, 3 } },
	  "0000:00:09.0", -ENODEV, NULL },
	{ "a name with a slash", { { "0000:00:04.0", IVSHMEM, BAR_1M, true, 3 } },
	  "../0000:00:04.0", -EINVAL, NULL },
	{ "an empty tree", { { NULL } }, NULL, -ENODEV, NULL },
};

static void test_find(void **state)
{
	const struct find_case *c = *state;
	char *root = fake_root_new(c->devs);
	char out[VF_PCI_BDF_MAX] = "untouched";

	assert_int_equal(vf_pci_find(root, c->bdf, out, sizeof(out)), c->want);
	assert_string_equal(out, c->want ? "untouched" : c->want_bdf);
	fake_root_free(root);
}

static void test_find_no_root(void **state)
{
	char out[VF_PCI_BDF_MAX];

	(void)state;
	assert_int_equal(vf_pci_find("/nonexistent/vgpu/sysfs", NULL, out, sizeof(out)), -ENOENT);
}

static void test_find_short_buffer(void **state)
{
	static const struct fake_dev devs[] = { { "0000:00:04.0", IVSHMEM, BAR_1M, true, 3 }, { NULL } };
	char *root = fake_root_new(devs);
	char out[4];

	(void)state;
	assert_int_equal(vf_pci_find(root, NULL, out, sizeof(out)), -ENAMETOOLONG);
	fake_root_free(root);
}

/* ---- the sysfs transport on a fake device ---- */

static uint32_t doorbell_of(const char *root, const char *bdf)
{
	char path[PATH_MAX];
	uint32_t v = 0;
	int fd;

	snprintf(path, sizeof(path), "%s/%s/resource0", root, bdf);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &v, 4, VF_PCI_REG_DOORBELL), 4);
	close(fd);
	return v;
}

static void test_sysfs_ops(void **state)
{
	static const struct fake_dev devs[] = { { "0000:00:04.0", IVSHMEM, 2 * BAR_1M, true, 3 },
						{ NULL } };
	char *root = fake_root_new(devs), path[PATH_MAX];
	struct vgpu_vf_transport *t;
	uint64_t size, word = 0x1122334455667788ull, back = 0;
	void *bar;
	int fd;

	(void)state;
	assert_int_equal(vf_sysfs_transport_at(root, NULL, &t), 0);
	assert_string_equal(t->ops->name, "sysfs");
	assert_false(t->ops->alive(t));
	assert_int_equal(t->ops->notify(t, 0), -ENOLINK);
	assert_int_equal(t->ops->attach(t, &bar, &size), 0);
	assert_int_equal(t->ops->attach(t, &bar, &size), -EALREADY);
	assert_int_equal(size, 2 * BAR_1M);
	assert_int_equal(t->ops->nr_vectors(t), 3);
	assert_true(t->ops->alive(t));
	/* The mapping is the file: a store through it is in resource2. */
	memcpy((uint8_t *)bar + 4096, &word, 8);
	snprintf(path, sizeof(path), "%s/0000:00:04.0/resource2", root);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &back, 8, 4096), 8);
	close(fd);
	assert_int_equal(back, word);
	/* Rings are BAR0 doorbell writes to peer 0 (vgpud). */
	assert_int_equal(t->ops->notify(t, 2), 0);
	assert_int_equal(doorbell_of(root, "0000:00:04.0"), vf_pci_doorbell(0, 2));
	assert_int_equal(t->ops->notify(t, 0), 0);
	assert_int_equal(doorbell_of(root, "0000:00:04.0"), 0);
	assert_int_equal(t->ops->notify(t, 3), -EINVAL);
	/* No interrupts: a wait is a short sleep that says "look again". */
	assert_int_equal(t->ops->wait(t, 1, 10ull * 1000 * 1000 * 1000), 0);
	assert_int_equal(t->ops->wait(t, 3, 1000), -EINVAL);
	t->ops->detach(t);
	assert_false(t->ops->alive(t));
	assert_int_equal(t->ops->wait(t, 0, 1000), -ENOLINK);
	/* Reusable after detach, as recovery needs. */
	assert_int_equal(t->ops->attach(t, &bar, &size), 0);
	t->ops->destroy(t);
	fake_root_free(root);
}

/* A header that is not a VF's (no vectors) fails the attach and leaves nothing mapped. */
static void test_sysfs_bad_header(void **state)
{
	static const struct fake_dev devs[] = { { "0000:00:04.0", IVSHMEM, BAR_1M, true, 0 },
						{ NULL } };
	char *root = fake_root_new(devs);
	struct vgpu_vf_transport *t;
	uint64_t size;
	void *bar;

	(void)state;
	assert_int_equal(vf_sysfs_transport_at(root, "0000:00:04.0", &t), 0);
	assert_int_equal(t->ops->attach(t, &bar, &size), -EPROTO);
	assert_false(t->ops->alive(t));
	assert_int_equal(t->ops->nr_vectors(t), 0);
	t->ops->destroy(t);
	fake_root_free(root);
}

static void test_sysfs_no_device(void **state)
{
	char *root = fake_root_new(NULL);
	struct vgpu_vf_transport *t = NULL;

	(void)state;
	assert_int_equal(vf_sysfs_transport_at(root, NULL, &t), -ENODEV);
	assert_null(t);
	fake_root_free(root);
}

/* This machine is no VM with our device: the vfio transport finds nothing, and the attack
 * helpers refuse a transport that is not vfio's. */
static void test_vfio_not_here(void **state)
{
	struct vgpu_vf_transport *t = NULL;
	uint32_t v;
	int ret;

	(void)state;
	ret = vgpu_vf_transport_vfio(NULL, &t);
	if (ret == 0) {
		t->ops->destroy(t);
		skip();		/* a VM with a vgpu VF after all */
	}
	assert_true(ret == -ENODEV || ret == -ENOENT);
	assert_null(t);
	assert_int_equal(vgpu_vf_transport_sysfs("../x", &t), -EINVAL);
	assert_int_equal(vgpu_vf_transport_local("/nonexistent.sock", &t), 0);
	assert_false(vf_vfio_is(t));
	assert_int_equal(vf_vfio_bar0_read(t, VF_PCI_REG_IVPOSITION, &v), -EINVAL);
	assert_int_equal(vf_vfio_bar0_write(t, VF_PCI_REG_DOORBELL, 0), -EINVAL);
	assert_int_equal(vf_vfio_region_mmap(t, VF_PCI_REGION_BAR2, 0, 4096), -EINVAL);
	assert_int_equal(vf_vfio_bar2_size(t), 0);
	t->ops->destroy(t);
}

/* ---- against a real vgpud ---- */

struct vgpud {
	char tmp[64], run[PATH_MAX], state[PATH_MAX], bin[PATH_MAX];
	pid_t pid;
};

static int run_wait(char *const argv[], const char *log)
{
	int st, fd;
	pid_t pid = fork();

	if (pid == 0) {
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(argv[0], argv);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* vgpuctl on the test's daemon with the NULL-terminated arguments; its exit status. */
static int ctl(struct vgpud *d, ...)
{
	char prog[PATH_MAX + 16], sock[PATH_MAX + 16], log[PATH_MAX];
	char *argv[12] = { prog, "--socket", sock };
	int n = 3;
	va_list ap;

	va_start(ap, d);
	while (n < 11 && (argv[n] = va_arg(ap, char *)))
		n++;
	va_end(ap);
	argv[n] = NULL;
	snprintf(prog, sizeof(prog), "%s/vgpuctl", d->bin);
	snprintf(sock, sizeof(sock), "%s/control.sock", d->run);
	snprintf(log, sizeof(log), "%s/vgpuctl.log", d->tmp);
	return run_wait(argv, log);
}

static int vgpud_start(struct vgpud *d)
{
	char exe[PATH_MAX], prog[PATH_MAX + 16], sock[PATH_MAX + 16], log[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	struct stat st;

	if (n < 0)
		return -errno;
	exe[n] = 0;
	snprintf(d->bin, sizeof(d->bin), "%s/../../bin", dirname(exe));
	snprintf(prog, sizeof(prog), "%s/vgpud", d->bin);
	if (access(prog, X_OK))
		return -ENOENT;
	strcpy(d->tmp, "/tmp/vgpu-vfpci-d-XXXXXX");
	if (!mkdtemp(d->tmp))
		return -errno;
	snprintf(d->run, sizeof(d->run), "%s/run", d->tmp);
	snprintf(d->state, sizeof(d->state), "%s/state", d->tmp);
	snprintf(log, sizeof(log), "%s/vgpud.log", d->tmp);
	mkdir(d->run, 0700);
	mkdir(d->state, 0700);
	d->pid = fork();
	if (d->pid == 0) {
		char *argv[] = { prog, "--runtime-dir", d->run, "--state-dir", d->state, "--vram",
				 "4G", "--max-vfs", "4", "--num-vfs", "4", "--spare-vram", "256M",
				 "--log-level", "warn", NULL };
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(prog, argv);
		_exit(127);
	}
	snprintf(sock, sizeof(sock), "%s/control.sock", d->run);
	for (int i = 0; i < 500; i++) {
		if (stat(sock, &st) == 0)
			return 0;
		if (waitpid(d->pid, NULL, WNOHANG) == d->pid)
			return -ECHILD;
		usleep(20 * 1000);
	}
	return -ETIMEDOUT;
}

/* Stop the daemon, remove its slices' shm objects (named after the instance in its
 * journal: they outlive a clean stop on purpose) and the temp dir. */
static void vgpud_stop(struct vgpud *d)
{
	char cmd[3 * PATH_MAX];

	if (d->pid > 0) {
		kill(d->pid, SIGTERM);
		waitpid(d->pid, NULL, 0);
	}
	snprintf(cmd, sizeof(cmd),
		 "p=$(sed -n 's/.*\"instance\": *\"\\([^\"]*\\)\".*/\\1/p' '%s/journal.json' "
		 "2>/dev/null | head -1); [ -z \"$p\" ] || rm -f /dev/shm/\"$p\"-vf*; rm -rf '%s'",
		 d->state, d->tmp);
	if (system(cmd))
		fprintf(stderr, "cleanup of %s failed\n", d->tmp);
}

/* The /dev/shm object behind VF 1's BAR2. */
static int bar_object(struct vgpud *d, char *out, size_t len)
{
	char path[PATH_MAX + 16], buf[8192], *p, *e;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "%s/journal.json", d->state);
	f = fopen(path, "r");
	if (!f)
		return -errno;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strstr(buf, "\"instance\"");
	if (!p || !(p = strchr(p + 10, '"')) || !(e = strchr(p + 1, '"')))
		return -EPROTO;
	*e = 0;
	snprintf(out, len, "/dev/shm/%s-vf1", p + 1);
	return 0;
}

/* "QEMU": the peer on the endpoint, forwarding fake BAR0 doorbell writes to vgpud. */
struct forwarder {
	struct vgpu_vf_transport *peer;
	_Atomic uint32_t *doorbell;
	atomic_bool stop;
	unsigned long forwarded;
};

static void *forward(void *arg)
{
	struct forwarder *f = arg;
	struct timespec ts = { 0, 20 * 1000 };

	while (!atomic_load(&f->stop)) {
		uint32_t v = atomic_exchange(f->doorbell, DB_SENTINEL);

		if (v == DB_SENTINEL) {
			nanosleep(&ts, NULL);
			continue;
		}
		/* QEMU drops rings of peers it does not know; vgpud is peer 0. */
		if (v >> 16 == 0 && f->peer->ops->notify(f->peer, v & 0xff) == 0)
			f->forwarded++;
	}
	return NULL;
}

static void test_vgpud_sysfs(void **state)
{
	static const struct fake_dev devs[] = { { "0000:00:04.0", IVSHMEM, 0, false, 0 }, { NULL } };
	struct vgpud d = { .pid = -1 };
	char *root, res2[PATH_MAX + 32], res0[PATH_MAX + 32], obj[PATH_MAX], sock[PATH_MAX + 16];
	struct vgpu_vf_transport *peer, *t;
	struct forwarder f = { 0 };
	struct vgpu_vf_info info;
	struct vgpu_vf *vf;
	struct vft_opts o = { .only = "mailbox" };
	struct vgpu_vf_opts vo = { .quiet = true };
	pthread_t th;
	uint64_t size;
	void *bar, *regs;
	FILE *out;
	int fd, failed;

	(void)state;
	if (vgpud_start(&d)) {
		vgpud_stop(&d);
		skip();		/* vgpud is not built next to this test */
	}
	assert_int_equal(ctl(&d, "define", "-t", "vgpu-512M", "-u", SLICE_UUID, "--manual", NULL), 0);
	assert_int_equal(ctl(&d, "start", "-u", SLICE_UUID, NULL), 0);
	/* The peer on the endpoint: what QEMU would be. */
	snprintf(sock, sizeof(sock), "%s/vf1.sock", d.run);
	assert_int_equal(vgpu_vf_transport_local(sock, &peer), 0);
	assert_int_equal(peer->ops->attach(peer, &bar, &size), 0);
	/* The fake device: resource2 is the BAR2 object itself, resource0 a regular file. */
	root = fake_root_new(devs);
	assert_int_equal(bar_object(&d, obj, sizeof(obj)), 0);
	snprintf(res2, sizeof(res2), "%s/0000:00:04.0/resource2", root);
	assert_int_equal(symlink(obj, res2), 0);
	snprintf(res0, sizeof(res0), "%s/0000:00:04.0/resource0", root);
	fd = open(res0, O_RDWR);
	assert_true(fd >= 0);
	regs = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(regs != MAP_FAILED);
	close(fd);
	f.peer = peer;
	f.doorbell = (_Atomic uint32_t *)((uint8_t *)regs + VF_PCI_REG_DOORBELL);
	assert_int_equal(pthread_create(&th, NULL, forward, &f), 0);

	/* The driver over the sysfs tier: attach, handshake, the suite's mailbox cases. */
	assert_int_equal(vf_sysfs_transport_at(root, NULL, &t), 0);
	vo.transport = t;
	assert_int_equal(vgpu_vf_open(&vo, &vf), 0);
	vgpu_vf_get_info(vf, &info);
	assert_int_equal(info.vf_id, 1);
	assert_int_equal(info.vram_size, 512ull << 20);
	assert_int_equal(vgpu_vf_ping(vf, "over sysfs", 10), 0);
	vgpu_vf_close(vf);
	assert_int_equal(vf_sysfs_transport_at(root, NULL, &t), 0);
	o.transport = t;
	o.socket = "sysfs";
	out = tmpfile();
	assert_non_null(out);
	failed = vft_run(&o, out);
	if (failed) {
		char line[256];

		rewind(out);
		while (fgets(line, sizeof(line), out))
			fputs(line, stderr);
	}
	fclose(out);
	assert_int_equal(failed, 0);

	atomic_store(&f.stop, true);
	pthread_join(th, NULL);
	assert_true(f.forwarded > 0);
	munmap(regs, 4096);
	peer->ops->destroy(peer);
	fake_root_free(root);
	vgpud_stop(&d);
}

int main(void)
{
	struct CMUnitTest tests[VGPU_ARRAY_SIZE(find_cases) + 8];
	size_t n = 0;

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(find_cases); i++)
		tests[n++] = (struct CMUnitTest){ .name = find_cases[i].name, .test_func = test_find,
						  .initial_state = (void *)&find_cases[i] };
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_find_no_root);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_find_short_buffer);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_sysfs_ops);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_sysfs_bad_header);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_sysfs_no_device);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_vfio_not_here);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_vgpud_sysfs);
	return _cmocka_run_group_tests("vf_pci", tests, n, NULL, NULL);
}

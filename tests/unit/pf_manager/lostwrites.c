// SPDX-License-Identifier: MIT
/* LD_PRELOAD shim that loses what was not fsynced, as a power cut would. For every file
 * written under $VGPU_LOSTWRITES_DIR it keeps the contents as of the last fsync (a file
 * created since: empty); when the process ends through _exit (a vgpud crash point) it puts
 * every file written since its last fsync back to those contents. Renames and unlinks are
 * taken as durable at once (the directory's own fsync is not modelled). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LW_MAX		128
#define LW_PATH		512

struct lw_file {
	char path[LW_PATH];
	char *durable;		/* contents at the last fsync */
	size_t len;
	bool dirty;		/* written since */
	int fd;			/* open for writing, or -1 */
};

static struct lw_file lw_files[LW_MAX];
static pthread_mutex_t lw_lock = PTHREAD_MUTEX_INITIALIZER;

static bool lw_watched(const char *path)
{
	const char *dir = getenv("VGPU_LOSTWRITES_DIR");

	return dir && *dir && path && !strncmp(path, dir, strlen(dir));
}

static struct lw_file *lw_by_path(const char *path)
{
	for (int i = 0; i < LW_MAX; i++)
		if (lw_files[i].path[0] && !strcmp(lw_files[i].path, path))
			return &lw_files[i];
	return NULL;
}

static struct lw_file *lw_by_fd(int fd)
{
	for (int i = 0; fd >= 0 && i < LW_MAX; i++)
		if (lw_files[i].path[0] && lw_files[i].fd == fd)
			return &lw_files[i];
	return NULL;
}

/* The file's current contents (what an fsync makes durable). */
static void lw_snapshot(struct lw_file *f)
{
	int fd = (int)syscall(SYS_openat, AT_FDCWD, f->path, O_RDONLY | O_CLOEXEC);
	struct stat sb;

	free(f->durable);
	f->durable = NULL;
	f->len = 0;
	if (fd < 0)
		return;
	if (!fstat(fd, &sb) && sb.st_size > 0 && (f->durable = malloc((size_t)sb.st_size)))
		f->len = (size_t)pread(fd, f->durable, (size_t)sb.st_size, 0);
	syscall(SYS_close, fd);	/* not close(): ours takes the lock the caller holds */
}

static void lw_track(const char *path, int fd)
{
	struct lw_file *f;

	pthread_mutex_lock(&lw_lock);
	f = lw_by_path(path);
	for (int i = 0; !f && i < LW_MAX; i++) {
		if (!lw_files[i].path[0]) {
			f = &lw_files[i];
			snprintf(f->path, sizeof(f->path), "%s", path);
			f->dirty = true;	/* a new name's data is not durable yet */
		}
	}
	if (f)
		f->fd = fd;
	pthread_mutex_unlock(&lw_lock);
}

static int lw_open(const char *path, int flags, mode_t mode, bool at, int dirfd)
{
	static int (*real_openat)(int, const char *, int, ...);
	bool watch = (flags & (O_WRONLY | O_RDWR)) && lw_watched(path);
	struct lw_file *f;
	int fd;

	if (!real_openat)
		real_openat = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
	if (watch) {
		/* An existing file that the open truncates keeps its old contents as durable. */
		pthread_mutex_lock(&lw_lock);
		f = lw_by_path(path);
		pthread_mutex_unlock(&lw_lock);
		if (!f && access(path, F_OK) == 0) {
			lw_track(path, -1);
			pthread_mutex_lock(&lw_lock);
			f = lw_by_path(path);
			if (f) {
				lw_snapshot(f);
				f->dirty = false;
			}
			pthread_mutex_unlock(&lw_lock);
		}
	}
	fd = real_openat(at ? dirfd : AT_FDCWD, path, flags, mode);
	if (fd >= 0 && watch)
		lw_track(path, fd);
	return fd;
}

int open(const char *path, int flags, ...)
{
	mode_t mode = 0;
	va_list ap;

	if (flags & (O_CREAT | O_TMPFILE)) {
		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	return lw_open(path, flags, mode, false, 0);
}

int open64(const char *path, int flags, ...) __attribute__((alias("open")));

ssize_t write(int fd, const void *buf, size_t len)
{
	static ssize_t (*real_write)(int, const void *, size_t);
	struct lw_file *f;

	if (!real_write)
		real_write = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
	pthread_mutex_lock(&lw_lock);
	f = lw_by_fd(fd);
	if (f)
		f->dirty = true;
	pthread_mutex_unlock(&lw_lock);
	return real_write(fd, buf, len);
}

int fsync(int fd)
{
	static int (*real_fsync)(int);
	struct lw_file *f;
	int r;

	if (!real_fsync)
		real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
	r = real_fsync(fd);
	pthread_mutex_lock(&lw_lock);
	f = lw_by_fd(fd);
	if (f && !r) {
		lw_snapshot(f);
		f->dirty = false;
	}
	pthread_mutex_unlock(&lw_lock);
	return r;
}

int fdatasync(int fd)
{
	return fsync(fd);
}

int close(int fd)
{
	static int (*real_close)(int);
	struct lw_file *f;

	if (!real_close)
		real_close = (int (*)(int))dlsym(RTLD_NEXT, "close");
	pthread_mutex_lock(&lw_lock);
	f = lw_by_fd(fd);
	if (f)
		f->fd = -1;
	pthread_mutex_unlock(&lw_lock);
	return real_close(fd);
}

int rename(const char *from, const char *to)
{
	static int (*real_rename)(const char *, const char *);
	struct lw_file *f, *g;
	int r;

	if (!real_rename)
		real_rename = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
	r = real_rename(from, to);
	pthread_mutex_lock(&lw_lock);
	if (!r && (f = lw_by_path(from))) {
		g = lw_by_path(to);
		if (g) {
			free(g->durable);
			memset(g, 0, sizeof(*g));
		}
		snprintf(f->path, sizeof(f->path), "%s", to);
	}
	pthread_mutex_unlock(&lw_lock);
	return r;
}

int unlink(const char *path)
{
	static int (*real_unlink)(const char *);
	struct lw_file *f;
	int r;

	if (!real_unlink)
		real_unlink = (int (*)(const char *))dlsym(RTLD_NEXT, "unlink");
	r = real_unlink(path);
	pthread_mutex_lock(&lw_lock);
	if (!r && (f = lw_by_path(path))) {
		free(f->durable);
		memset(f, 0, sizeof(*f));
	}
	pthread_mutex_unlock(&lw_lock);
	return r;
}

/* The crash: every file written since its last fsync loses what it was not told to keep. */
void _exit(int status)
{
	for (int i = 0; i < LW_MAX; i++) {
		struct lw_file *f = &lw_files[i];
		int fd;

		if (!f->path[0] || !f->dirty)
			continue;
		fd = (int)syscall(SYS_openat, AT_FDCWD, f->path, O_WRONLY | O_TRUNC | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (f->len && syscall(SYS_write, fd, f->durable, f->len) < 0)
			errno = 0;
		syscall(SYS_close, fd);
	}
	syscall(SYS_exit_group, status);
	__builtin_unreachable();
}

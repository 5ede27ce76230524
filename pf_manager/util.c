// SPDX-License-Identifier: MIT
/* Small helpers: priorities, the fair share, atomic files, durability points, JSON and
 * UTF-8 bits. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/bitops.h"
#include "pf_manager/pf_internal.h"

int pf_priority_parse(const char *s, enum pf_priority *out)
{
	static const char *names[] = { "low", "normal", "high" };

	for (unsigned int i = 0; s && i < 3; i++) {
		if (!strcasecmp(s, names[i])) {
			*out = (enum pf_priority)i;
			return 0;
		}
	}
	return -EINVAL;
}

const char *pf_priority_name(enum pf_priority p)
{
	return p == PF_PRIO_LOW ? "low" : p == PF_PRIO_HIGH ? "high" : "normal";
}

uint64_t pf_fair_vram(uint64_t usable, unsigned int nr_vfs)
{
	uint64_t each;

	if (!nr_vfs)
		return 0;
	each = usable / nr_vfs;
	if (each < PF_VRAM_ALIGN)
		return 0;
	/* xe rounds the fair share down to a power of two: equal VFs tile VRAM without
	 * leaving holes that no later VF of the same size could use. */
	return 1ull << cmn_fls(each);
}

int pf_mkdir_p(const char *path, mode_t mode)
{
	char buf[PF_PATH_MAX];
	size_t n = strlen(path);

	if (n == 0 || n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, mode) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, mode) && errno != EEXIST)
		return -errno;
	return 0;
}

#ifdef VGPU_TEST_HOOKS
/* The crash-point switch: VGPU_CRASH_AT=N makes the Nth durability point (a write, fsync,
 * rename or unlink of state) end the process on the spot, as a power cut would, so a test
 * can walk every point of a verb. Read once; unset or 0 never crashes. Test builds only
 * (vgpud-test): an environment variable must not be able to kill the product. */
void pf_dur_point(const char *what)
{
	static long crash_at = -1, count;
	const char *v;

	if (crash_at < 0) {
		v = getenv("VGPU_CRASH_AT");
		crash_at = v ? strtol(v, NULL, 10) : 0;
		if (crash_at < 0)
			crash_at = 0;
	}
	if (crash_at && ++count == crash_at) {
		fprintf(stderr, "vgpud: crash point %ld (%s)\n", count, what);
		_exit(PF_CRASH_EXIT);
	}
}

void pf_test_stop_at_cmd(const char *name)
{
	const char *v = getenv("VGPU_STOP_AT_CMD");

	if (v && !strcmp(v, name))
		raise(SIGSTOP);
}

int pf_test_dir_fsync_err, pf_test_write_err;

int pf_test_dir_fsync_fault(void)
{
	int err = pf_test_dir_fsync_err;

	pf_test_dir_fsync_err = 0;
	return err;
}

int pf_test_write_fault(void)
{
	int err = pf_test_write_err;

	pf_test_write_err = 0;
	return err;
}
#endif

int pf_fsync_dir_of(const char *path)
{
	char dir[PF_PATH_MAX];
	const char *slash = strrchr(path, '/');
	int fd, ret = 0;

	if (!slash)
		return 0;
	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	fd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ret = pf_test_dir_fsync_fault();
	if (!ret && fsync(fd))
		ret = -errno;
	close(fd);
	return ret;
}

int pf_write_file_atomic(const char *path, const char *data, size_t len, int *dir_err)
{
	char tmp[PF_PATH_MAX + 16];
	size_t off = 0;
	int fd, ret;

	*dir_err = 0;
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	ret = pf_test_write_fault();
	if (ret)
		return ret;
	pf_dur_point("write");
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
	if (fd < 0)
		return -errno;
	while (off < len) {
		ssize_t w = write(fd, data + off, len - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			ret = w < 0 ? -errno : -EIO;
			goto unlink_tmp;
		}
		off += (size_t)w;
	}
	/* fsync before rename: after a crash the name points at either the old or the
	 * complete new contents, never at a short file. */
	pf_dur_point("fsync");
	if (fsync(fd)) {
		ret = -errno;
		goto unlink_tmp;
	}
	close(fd);
	pf_dur_point("rename");
	if (rename(tmp, path)) {
		ret = -errno;
		unlink(tmp);
		return ret;
	}
	/* Replaced: whatever the directory's fsync says, a reader (a restart) finds the new
	 * file now, so the caller must count the write as done. */
	pf_dur_point("fsync dir");
	*dir_err = pf_fsync_dir_of(path);
	return 0;
unlink_tmp:
	close(fd);
	unlink(tmp);
	return ret;
}

uint64_t pf_hash64(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	while (*s)
		h = (h ^ (uint8_t)*s++) * 0x100000001b3ull;
	return h;
}

json_object *pf_json_timestamp(void)
{
	struct timeval tv;
	json_object *o = json_object_new_object();

	gettimeofday(&tv, NULL);
	json_object_object_add(o, "seconds", json_object_new_int64(tv.tv_sec));
	json_object_object_add(o, "microseconds", json_object_new_int64(tv.tv_usec));
	return o;
}

void pf_json_add_u64(json_object *o, const char *key, uint64_t v)
{
	/* json-c stores uint64 exactly; sizes here stay below 2^63 anyway. */
	json_object_object_add(o, key, json_object_new_uint64(v));
}

int pf_json_parse_strict(const char *buf, size_t len, json_object **out)
{
	struct json_tokener *tok = json_tokener_new();
	size_t end;

	*out = NULL;
	if (!tok)
		return -ENOMEM;
	if (memchr(buf, 0, len)) {
		json_tokener_free(tok);
		return -EBADMSG;
	}
	*out = json_tokener_parse_ex(tok, buf, (int)len);
	end = *out ? json_tokener_get_parse_end(tok) : 0;
	json_tokener_free(tok);
	while (*out && end < len && strchr(" \t\r\n", buf[end]))
		end++;
	if (*out && end == len)
		return 0;
	json_object_put(*out);
	*out = NULL;
	return -EBADMSG;
}

/* Length of the well-formed UTF-8 sequence at @s (at most @n bytes), 0 if none. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	size_t len = s[0] < 0x80 ? 1 : s[0] >= 0xc2 && s[0] <= 0xdf ? 2 :
		     s[0] >= 0xe0 && s[0] <= 0xef ? 3 : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;

	if (!len || len > n)
		return 0;
	for (size_t i = 1; i < len; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	/* Overlong three- and four-byte forms, surrogates, code points above U+10FFFF. */
	if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f) ||
	    (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] > 0x8f))
		return 0;
	return len;
}

bool pf_utf8_valid(const char *s, size_t len)
{
	for (size_t i = 0, k; i < len; i += k) {
		k = utf8_seq((const unsigned char *)s + i, len - i);
		if (!k)
			return false;
	}
	return true;
}

void pf_utf8_scrub(char *s)
{
	size_t n = strlen(s);

	for (size_t i = 0, k; i < n; i += k) {
		k = utf8_seq((unsigned char *)s + i, n - i);
		if (!k) {
			s[i] = '?';
			k = 1;
		}
	}
}

bool pf_json_str_clean(json_object *v)
{
	const char *s = json_object_get_string(v);
	size_t len = (size_t)json_object_get_string_len(v);

	return json_object_is_type(v, json_type_string) && strlen(s) == len &&
	       pf_utf8_valid(s, len);
}

const char *pf_json_kind(json_object *v)
{
	switch (json_object_get_type(v)) {
	case json_type_null:
		return "null";
	case json_type_boolean:
		return "a boolean";
	case json_type_double:
		return "a number with a fraction or an exponent";
	case json_type_int:
		return "an integer";
	case json_type_object:
		return "an object";
	case json_type_array:
		return "an array";
	case json_type_string:
		return pf_json_str_clean(v) ? "a string" :
		       "a string holding a NUL byte or invalid UTF-8";
	}
	return "a value of no JSON type";
}

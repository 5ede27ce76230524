/* Small helpers: sizes, UUIDs, atomic files, JSON bits. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
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

int pf_fail(struct pf_err *e, int code, const char *fmt, ...)
{
	va_list ap;

	if (!e)
		return code;
	e->code = code;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	return code;
}

static int size_suffix_shift(const char *p, unsigned int *shift)
{
	static const char units[] = "BKMGTP";
	const char *u;

	if (!*p) {
		*shift = 0;
		return 0;
	}
	u = strchr(units, *p == 'b' ? 'B' : (*p >= 'a' && *p <= 'z' ? *p - 32 : *p));
	if (!u || !*u)
		return -EINVAL;
	*shift = (unsigned int)(u - units) * 10;
	p++;
	/* "G", "GB", "GiB" all mean 2^30: sizes here are IEC throughout. */
	if (*shift && (!strcmp(p, "iB") || !strcmp(p, "ib") || !strcmp(p, "B")))
		return 0;
	return *p ? -EINVAL : 0;
}

int pf_parse_size(const char *s, uint64_t *out)
{
	unsigned long long v;
	unsigned int shift;
	char *end;

	if (!s || !*s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return -ERANGE;
	while (*end == ' ')
		end++;
	if (size_suffix_shift(end, &shift))
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = (uint64_t)v << shift;
	return 0;
}

const char *pf_format_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	unsigned int u = 0;
	uint64_t whole = bytes;

	while (whole >= 1024 && u < 5) {
		whole >>= 10;
		u++;
	}
	if (!u || !(bytes & ((1ull << (10 * u)) - 1)))
		snprintf(buf, len, "%" PRIu64 " %s", whole, units[u]);
	else
		snprintf(buf, len, "%.1f %s", (double)bytes / (double)(1ull << (10 * u)), units[u]);
	return buf;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int pf_uuid_parse(const char *s, char out[PF_UUID_STR], uint8_t bytes[16])
{
	uint8_t b[16];
	unsigned int n = 0;

	if (!s || strlen(s) != 36)
		return -EINVAL;
	for (unsigned int i = 0; i < 36;) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i++] != '-')
				return -EINVAL;
			continue;
		}
		int hi = hexval(s[i]), lo = hexval(s[i + 1]);

		if (hi < 0 || lo < 0)
			return -EINVAL;
		b[n++] = (uint8_t)(hi << 4 | lo);
		i += 2;
	}
	if (bytes)
		memcpy(bytes, b, 16);
	if (out) {
		for (unsigned int i = 0; i < 36; i++)
			out[i] = (char)(s[i] >= 'A' && s[i] <= 'F' ? s[i] + 32 : s[i]);
		out[36] = 0;
	}
	return 0;
}

void pf_uuid_generate(char out[PF_UUID_STR])
{
	uint8_t b[16];

	if (getrandom(b, sizeof(b), 0) != sizeof(b)) {
		/* Only without entropy at early boot; the clock keeps UUIDs distinct. */
		uint64_t t = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);

		for (unsigned int i = 0; i < 16; i++)
			b[i] = (uint8_t)(t >> (8 * (i % 8))) ^ (uint8_t)(i * 37);
	}
	b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
	b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
	snprintf(out, PF_UUID_STR,
		 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
		 b[12], b[13], b[14], b[15]);
}

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

static int fsync_dir_of(const char *path)
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
	if (fsync(fd))
		ret = -errno;
	close(fd);
	return ret;
}

int pf_write_file_atomic(const char *path, const char *data, size_t len)
{
	char tmp[PF_PATH_MAX + 16];
	size_t off = 0;
	int fd, ret;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
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
	if (fsync(fd)) {
		ret = -errno;
		goto unlink_tmp;
	}
	close(fd);
	if (rename(tmp, path)) {
		ret = -errno;
		unlink(tmp);
		return ret;
	}
	return fsync_dir_of(path);
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

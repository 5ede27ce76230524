// SPDX-License-Identifier: MIT
/* Small helpers: priorities, the fair share, atomic files, durability points, JSON and
 * UTF-8 bits. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
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

/* mkdir @dir; a directory it makes is synced into its parent, so that a file renamed into
 * it later is not lost with it in a crash. 0 if it is there (made now or before). */
static int mkdir_synced(const char *dir, mode_t mode)
{
	if (mkdir(dir, mode))
		return errno == EEXIST ? 0 : -errno;
	return pf_fsync_dir_of(dir);
}

int pf_mkdir_p(const char *path, mode_t mode)
{
	char buf[PF_PATH_MAX];
	size_t n = strlen(path);
	int r;

	if (n == 0 || n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		r = mkdir_synced(buf, mode);
		if (r)
			return r;
		*p = '/';
	}
	return mkdir_synced(buf, mode);
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

	/* A bare name lives in the working directory. */
	snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
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
	/* The temp file is made anew, never opened through what stands at its name: a link
	 * planted there would have the write land in the file it names. A leftover is ours by
	 * name (a crash between the write and the rename); what cannot be removed (a
	 * directory) fails the write. */
	if (unlink(tmp) && errno != ENOENT)
		return -errno;
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
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

/* ---- repeated keys ------------------------------------------------------------------------ */

/*
 * json-c keeps the last value of a key an object repeats, and says nothing; another reader of
 * the same text (a proxy, an audit log, a person) may take the first. The walk below goes
 * through the text json-c has parsed beside the value it made of it. json-c keeps an
 * object's keys in the order they first appear, so the text's keys, compared in order with
 * the value's, match until the first one that repeats an earlier key. A value is paired with
 * its text only while no repeat has been seen: after a repeat the value of an earlier
 * occurrence is the later one's, and what the walk finds inside it gives way to the repeat
 * found in the object around it. Each byte is stepped over once; the recursion is as deep as
 * the text's nesting, which json-c's tokener has bounded (32 levels unless set otherwise).
 */
struct jdup {
	const char *p, *end;		/* the text still to walk */
	struct json_tokener *tok;	/* decodes a key with escapes; made on first need */
	json_object *kstr;		/* the key it decoded last */
	char path[112];			/* where the walk is, as "arguments.attrs[1]" */
	size_t plen;
	bool found;			/* @why says which key repeats */
	int err;			/* a key could not be decoded (-ENOMEM) */
	char *why;
	size_t why_len;
};

/* The walk's message, in @why if the caller gave one. */
static void __attribute__((format(printf, 2, 3))) jd_say(struct jdup *j, const char *fmt, ...)
{
	va_list ap;

	if (!j->why_len)
		return;
	va_start(ap, fmt);
	vsnprintf(j->why, j->why_len, fmt, ap);
	va_end(ap);
	pf_utf8_scrub(j->why);
}

/* Append @n bytes of @s to @buf (@size bytes, *@len used) for a message: control bytes,
 * quotes and backslashes as '?'; what does not fit is cut and ends in "...". */
static void jd_put(char *buf, size_t size, size_t *len, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (*len + 1 >= size) {
			if (size > 4)
				memcpy(buf + size - 4, "...", 3);
			break;
		}
		buf[(*len)++] = c < 0x20 || c == 0x7f || c == '"' || c == '\\' ? '?' : (char)c;
	}
	buf[*len] = 0;
}

/* Past a block comment as json-c 0.16 reads it: each '*' in it takes the next byte along,
 * and the comment ends at a '*' whose next byte is '/'; a '/' after a doubled '*' does not
 * end it. */
static void jd_block_comment(struct jdup *j)
{
	j->p += 2;
	for (;;) {
		const char *star = memchr(j->p, '*', (size_t)(j->end - j->p));

		if (!star || j->end - star < 2) {
			j->p = j->end;
			return;
		}
		j->p = star + 2;
		if (star[1] == '/')
			return;
	}
}

/* Past whitespace and comments: json-c takes both between tokens. */
static void jd_ws(struct jdup *j)
{
	while (j->p < j->end) {
		const char *e;

		if (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r') {
			j->p++;
		} else if (*j->p == '/' && j->end - j->p > 1 && j->p[1] == '*') {
			jd_block_comment(j);
		} else if (*j->p == '/' && j->end - j->p > 1 && j->p[1] == '/') {
			e = memchr(j->p, '\n', (size_t)(j->end - j->p));
			j->p = e ? e + 1 : j->end;
		} else {
			return;
		}
	}
}

/* Past the string at j->p, in either quote: json-c takes 'single' ones too. */
static void jd_string(struct jdup *j)
{
	char q = *j->p++;

	while (j->p < j->end && *j->p != q) {
		if (*j->p == '\\' && j->end - j->p > 1)
			j->p++;
		j->p++;
	}
	if (j->p < j->end)
		j->p++;
}

/* The key whose quoted text is [@s, @e) as json-c keeps it: escapes decoded by json-c's own
 * tokener, and cut at its first NUL byte (json-c's keys are C strings); its length in *@n.
 * NULL with j->err set if it cannot be decoded. */
static const char *jd_key(struct jdup *j, const char *s, const char *e, size_t *n)
{
	const char *k = s + 1;
	size_t len = e - s > 2 ? (size_t)(e - s) - 2 : 0;

	if (memchr(k, '\\', len)) {
		if (!j->tok)
			j->tok = json_tokener_new();
		else
			json_tokener_reset(j->tok);
		json_object_put(j->kstr);
		j->kstr = j->tok ? json_tokener_parse_ex(j->tok, s, (int)(e - s)) : NULL;
		if (!json_object_is_type(j->kstr, json_type_string)) {
			j->err = j->tok ? -EBADMSG : -ENOMEM;
			jd_say(j, "%s", j->tok ? "a key json-c cannot decode again" :
			       "out of memory");
			return NULL;
		}
		k = json_object_get_string(j->kstr);
		len = (size_t)json_object_get_string_len(j->kstr);
	}
	*n = strnlen(k, len);
	return k;
}

/* Key @k (@n bytes) repeats in the object at j->path: the message names both. */
static void jd_repeat(struct jdup *j, const char *k, size_t n)
{
	char key[72];
	size_t kl = 0;

	jd_put(key, sizeof(key), &kl, k, n);
	if (j->plen)
		jd_say(j, "key \"%s\" appears twice in \"%s\"", key, j->path);
	else
		jd_say(j, "key \"%s\" appears twice in the top-level object", key);
	j->found = true;
}

/* Step into member @k (@n bytes) or, with @k NULL, element @idx; the length to go back to. */
static size_t jd_push(struct jdup *j, const char *k, size_t n, size_t idx)
{
	size_t old = j->plen;
	char b[24];

	if (k) {
		if (old)
			jd_put(j->path, sizeof(j->path), &j->plen, ".", 1);
		jd_put(j->path, sizeof(j->path), &j->plen, k, n);
	} else {
		jd_put(j->path, sizeof(j->path), &j->plen, b,
		       (size_t)snprintf(b, sizeof(b), "[%zu]", idx));
	}
	return old;
}

static void jd_pop(struct jdup *j, size_t old)
{
	j->plen = old;
	j->path[old] = 0;
}

static void jd_value(struct jdup *j, json_object *v, bool paired);

/* Past whitespace and separating commas to the next member or element: false at @close
 * or at the end of the text. */
static bool jd_next(struct jdup *j, char close)
{
	for (;;) {
		jd_ws(j);
		if (j->p >= j->end || *j->p == close)
			return false;
		if (*j->p != ',')
			return true;
		j->p++;
	}
}

/* The object at j->p beside @o (NULL: walked, paired with no value). */
static void jd_object(struct jdup *j, json_object *o)
{
	struct json_object_iterator it, end;
	bool own = false;	/* a key of this object repeats */

	if (o) {
		it = json_object_iter_begin(o);
		end = json_object_iter_end(o);
	}
	j->p++;
	while (jd_next(j, '}')) {
		const char *ks, *k, *name = NULL;
		bool pair = o && !own && !j->err;
		size_t n, old = 0;

		if (*j->p != '"' && *j->p != '\'') {
			j->p = j->end;	/* not a text json-c took: nothing more to learn */
			return;
		}
		ks = j->p;
		jd_string(j);
		if (pair) {
			k = jd_key(j, ks, j->p, &n);
			if (!k)
				return;
			name = json_object_iter_equal(&it, &end) ? NULL :
			       json_object_iter_peek_name(&it);
			if (!name || strlen(name) != n || memcmp(name, k, n)) {
				jd_repeat(j, k, n);
				own = true;
				pair = false;
			}
		}
		if (pair)
			old = jd_push(j, name, n, 0);
		jd_ws(j);
		if (j->p < j->end && *j->p == ':')
			j->p++;
		jd_value(j, pair ? json_object_iter_peek_value(&it) : NULL, pair && !j->found);
		if (pair) {
			jd_pop(j, old);
			json_object_iter_next(&it);
		}
	}
	if (j->p < j->end)
		j->p++;
}

/* The array at j->p beside @a (NULL: walked, paired with no value). */
static void jd_array(struct jdup *j, json_object *a)
{
	size_t idx = 0;

	j->p++;
	while (jd_next(j, ']')) {
		const char *at;
		bool pair = a && !j->found && !j->err && idx < json_object_array_length(a);
		size_t old = 0;

		if (pair)
			old = jd_push(j, NULL, 0, idx);
		at = j->p;
		jd_value(j, pair ? json_object_array_get_idx(a, idx) : NULL, pair);
		if (pair)
			jd_pop(j, old);
		if (j->p == at) {
			j->p = j->end;	/* not a text json-c took: nothing more to learn */
			return;
		}
		idx++;
	}
	if (j->p < j->end)
		j->p++;
}

/* The value at j->p, beside @v if @paired. */
static void jd_value(struct jdup *j, json_object *v, bool paired)
{
	jd_ws(j);
	if (j->p >= j->end)
		return;
	switch (*j->p) {
	case '{':
	case '[':
		/* A container of another kind is the value of a later occurrence of a key: that
		 * repeat, found in the object around, gives its own message. */
		if (paired && !json_object_is_type(v, *j->p == '{' ? json_type_object :
						   json_type_array)) {
			if (!j->found)
				jd_say(j, "a key repeats around \"%s\"", j->path);
			j->found = true;
			paired = false;
		}
		if (*j->p == '{')
			jd_object(j, paired ? v : NULL);
		else
			jd_array(j, paired ? v : NULL);
		break;
	case '"':
	case '\'':
		jd_string(j);
		break;
	default:
		/* A number or a literal: none holds a separator, a quote or a space. */
		while (j->p < j->end && *j->p && !strchr(",:]}/\"' \t\r\n", *j->p))
			j->p++;
	}
}

int pf_json_dup_check(const char *buf, size_t len, json_object *root, char *why,
		      size_t why_len)
{
	struct jdup j = { .p = buf, .end = buf + len, .why = why, .why_len = why ? why_len : 0 };

	jd_value(&j, root, true);
	json_object_put(j.kstr);
	if (j.tok)
		json_tokener_free(j.tok);
	return j.err ? j.err : j.found ? -EBADMSG : 0;
}

int pf_json_parse_checked(const char *buf, size_t len, json_object **out, char *why,
			  size_t why_len)
{
	struct json_tokener *tok = json_tokener_new();
	size_t end;
	int r;

	*out = NULL;
	if (!tok) {
		r = -ENOMEM;
		goto fail;
	}
	if (memchr(buf, 0, len)) {
		json_tokener_free(tok);
		r = -EBADMSG;
		goto fail;
	}
	*out = json_tokener_parse_ex(tok, buf, (int)len);
	end = *out ? json_tokener_get_parse_end(tok) : 0;
	json_tokener_free(tok);
	while (*out && end < len && strchr(" \t\r\n", buf[end]))
		end++;
	if (!*out || end != len) {
		r = -EBADMSG;
		goto fail;
	}
	r = pf_json_dup_check(buf, len, *out, why, why_len);
	if (!r)
		return 0;
	json_object_put(*out);
	*out = NULL;
	return r;
fail:
	json_object_put(*out);
	*out = NULL;
	if (why && why_len)
		snprintf(why, why_len, "%s", r == -ENOMEM ? "out of memory" :
			 "not one valid JSON value");
	return r;
}

int pf_json_parse_strict(const char *buf, size_t len, json_object **out)
{
	return pf_json_parse_checked(buf, len, out, NULL, 0);
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

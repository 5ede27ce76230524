// SPDX-License-Identifier: MIT
/* Configuration: defaults, the INI file (inih) and single keys set by flags. Each key is a
 * row of one table (its field, the values it takes, the form an error names), which the
 * file, the flags and the final check all go through. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdbool.h>
#include <stddef.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu_model/gpu.h"
#include "pf_manager/pf_internal.h"

void pf_config_defaults(struct pf_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	snprintf(cfg->model, sizeof(cfg->model), "vgpu");
	snprintf(cfg->pf_id, sizeof(cfg->pf_id), "0000:00:00.0");
	cfg->vram_size = 16ull << 30;
	cfg->max_vfs = PF_MAX_VFS;
	cfg->spare_vram = 512ull << 20;
	cfg->channels = 4096;
	cfg->doorbells = 4096;
	cfg->spare_channels = 64;
	cfg->spare_doorbells = 64;
	cfg->sched_policy = GPU_SCHED_BEST_EFFORT;
	cfg->dma_size = VF_BAR_DMA_DEFAULT;
	cfg->engines = 1;
	snprintf(cfg->runtime_dir, sizeof(cfg->runtime_dir), "/run/vgpud");
	snprintf(cfg->state_dir, sizeof(cfg->state_dir), "/var/lib/vgpud");
	cfg->socket_mode = 0660;
	cfg->max_line = 64 * 1024;
	cfg->admin_slots = 8;
	cfg->per_uid = 4;
	cfg->negotiate_ms = 5000;
	cfg->reset_evict_ms = PF_RESET_EVICT_MS_DEFAULT;
}

/* ---- the keys ----------------------------------------------------------------------------- */

/* The settings, each with its line in struct pf_config; quantum_us and quantum_ms are two
 * spellings of one, so a file may give only one of them. */
enum cfg_slot {
	S_MODEL, S_VRAM, S_ENGINES, S_CHANNELS, S_DOORBELLS,
	S_ID, S_MAX_VFS, S_NUM_VFS, S_SPARE_VRAM, S_SPARE_CHANNELS, S_SPARE_DOORBELLS,
	S_DMA_SIZE, S_EVICT, S_PREALLOC,
	S_POLICY, S_QUANTUM,
	S_RUNTIME_DIR, S_STATE_DIR,
	S_ADMIN_GROUP, S_SOCKET_MODE, S_MAX_LINE, S_ADMIN_SLOTS, S_PER_UID, S_NEGOTIATE,
	S_NR
};
_Static_assert(S_NR <= PF_CONFIG_KEYS, "struct pf_config records a line per setting");

enum cfg_kind {
	K_COUNT,	/* decimal, min..max */
	K_MS,		/* whole milliseconds of a microsecond count, min..max in ms */
	K_SIZE,		/* bytes or K/M/G/T: a multiple of 2 MiB, min..max */
	K_NAME,		/* [A-Za-z0-9._-], a letter or digit first, min..max characters */
	K_TEXT,		/* min..max characters, none a control character */
	K_GROUP,	/* a group name of up to max characters; empty: root alone */
	K_DIR,		/* an absolute path of up to max characters */
	K_MODE,		/* octal, up to 0777 */
	K_BOOL,
	K_POLICY,
};

struct cfg_key {
	const char *section, *name;
	enum cfg_slot slot;
	enum cfg_kind kind;
	size_t off, size;	/* the field in struct pf_config */
	uint64_t min, max;
	const char *form;	/* what it takes, for an error */
};

/* A row for field @f, which must be of type @t (another does not compile). */
#define ROW(sec, key, slot, kind, f, t, lo, hi, form)					\
	{ sec, key, slot, kind, offsetof(struct pf_config, f),				\
	  sizeof(((struct pf_config *)0)->f) * _Generic(((struct pf_config *)0)->f, t: 1),	\
	  lo, hi, form }
#define MiB	(1ull << 20)

static const struct cfg_key keys[] = {
	ROW("gpu", "model", S_MODEL, K_NAME, model, char *, 1, PF_MODEL_MAX,
	    "1 to 20 characters of A-Z a-z 0-9 . _ -, a letter or digit first"),
	ROW("gpu", "vram", S_VRAM, K_SIZE, vram_size, uint64_t, 2 * MiB, 1ull << 40,
	    "a multiple of 2M, 2M to 1T"),
	ROW("gpu", "engines", S_ENGINES, K_COUNT, engines, unsigned int, 1, GPU_MAX_ENGINES,
	    "1 to 4"),
	ROW("gpu", "channels", S_CHANNELS, K_COUNT, channels, unsigned int, 1, 1u << 20,
	    "1 to 1048576"),
	ROW("gpu", "doorbells", S_DOORBELLS, K_COUNT, doorbells, unsigned int, 1, 1u << 20,
	    "1 to 1048576"),
	ROW("pf", "id", S_ID, K_TEXT, pf_id, char *, 1, PF_NAME_MAX - 1,
	    "1 to 39 characters, no control character"),
	ROW("pf", "max_vfs", S_MAX_VFS, K_COUNT, max_vfs, unsigned int, 1, PF_MAX_VFS,
	    "1 to 63"),
	ROW("pf", "num_vfs", S_NUM_VFS, K_COUNT, num_vfs, unsigned int, 0, PF_MAX_VFS,
	    "0 to 63"),
	ROW("pf", "spare_vram", S_SPARE_VRAM, K_SIZE, spare_vram, uint64_t, 0, 1ull << 40,
	    "a multiple of 2M, 0 to 1T"),
	ROW("pf", "spare_channels", S_SPARE_CHANNELS, K_COUNT, spare_channels, unsigned int, 0,
	    1u << 20, "0 to 1048576"),
	ROW("pf", "spare_doorbells", S_SPARE_DOORBELLS, K_COUNT, spare_doorbells, unsigned int,
	    0, 1u << 20, "0 to 1048576"),
	ROW("pf", "dma_size", S_DMA_SIZE, K_SIZE, dma_size, uint64_t, 2 * MiB, 1ull << 30,
	    "a multiple of 2M, 2M to 1G"),
	ROW("pf", "reset_evict_ms", S_EVICT, K_COUNT, reset_evict_ms, unsigned int, 0,
	    PF_RESET_EVICT_MS_MAX, "0 to 10000"),
	ROW("pf", "vram_prealloc", S_PREALLOC, K_BOOL, vram_prealloc, bool, 0, 1,
	    "true or false; yes/no, on/off and 1/0 also do"),
	ROW("sched", "policy", S_POLICY, K_POLICY, sched_policy, int, 0, 0,
	    "best-effort, equal-share or fixed-share"),
	ROW("sched", "quantum_us", S_QUANTUM, K_COUNT, sched_quantum_us, unsigned int, 0,
	    PF_SCHED_QUANTUM_US_MAX, "0 to 10000000"),
	ROW("sched", "quantum_ms", S_QUANTUM, K_MS, sched_quantum_us, unsigned int, 0,
	    PF_SCHED_QUANTUM_US_MAX / 1000, "0 to 10000"),
	ROW("paths", "runtime_dir", S_RUNTIME_DIR, K_DIR, runtime_dir, char *, 1,
	    PF_RUNTIME_DIR_MAX, "an absolute path of at most 90 characters"),
	ROW("paths", "state_dir", S_STATE_DIR, K_DIR, state_dir, char *, 1, PF_PATH_MAX - 1,
	    "an absolute path of at most 511 characters"),
	ROW("control", "admin_group", S_ADMIN_GROUP, K_GROUP, admin_group, char *, 0,
	    PF_NAME_MAX - 1, "a group of at most 39 characters, or nothing for root alone"),
	ROW("control", "socket_mode", S_SOCKET_MODE, K_MODE, socket_mode, unsigned int, 0, 0777,
	    "an octal mode, 0 to 0777"),
	ROW("control", "max_line", S_MAX_LINE, K_COUNT, max_line, unsigned int, 1024, 16u << 20,
	    "1024 to 16777216"),
	ROW("control", "admin_slots", S_ADMIN_SLOTS, K_COUNT, admin_slots, unsigned int, 0,
	    PF_MAX_CLIENTS - 1, "0 to 31"),
	ROW("control", "per_uid", S_PER_UID, K_COUNT, per_uid, unsigned int, 1, PF_MAX_CLIENTS,
	    "1 to 32"),
	ROW("control", "negotiate_timeout_ms", S_NEGOTIATE, K_COUNT, negotiate_ms, unsigned int,
	    1, 3600000, "1 to 3600000"),
};
#define NR_KEYS	(sizeof(keys) / sizeof(keys[0]))

static const struct cfg_key *key_find(const char *section, const char *name)
{
	for (size_t i = 0; i < NR_KEYS; i++)
		if (!strcmp(keys[i].section, section) && !strcmp(keys[i].name, name))
			return &keys[i];
	return NULL;
}

/* The first row of @slot: the name its messages use. */
static const struct cfg_key *slot_key(enum cfg_slot slot)
{
	size_t i = 0;

	while (keys[i].slot != slot)
		i++;
	return &keys[i];
}

/* ---- values ------------------------------------------------------------------------------- */

/* A count in decimal: a leading 0 does not make it octal, as it would for strtoul base 0. */
static int parse_uint(const char *v, uint64_t max, unsigned int *out)
{
	unsigned long x;
	char *end;

	if (!v || *v < '0' || *v > '9')
		return -EINVAL;
	errno = 0;
	x = strtoul(v, &end, 10);
	if (errno || *end || x > max)
		return -ERANGE;
	*out = (unsigned int)x;
	return 0;
}

/* A file mode in octal with or without its leading 0, as chmod(1) takes it: "660" is 0660,
 * never decimal 660 (01224) nor the 0334 that decimal 220 is. */
static int parse_mode(const char *v, unsigned int *out)
{
	unsigned long x;

	if (!v || !*v || strspn(v, "01234567") != strlen(v))
		return -EINVAL;
	errno = 0;
	x = strtoul(v, NULL, 8);
	if (errno || x > 0777)
		return -ERANGE;
	*out = (unsigned int)x;
	return 0;
}

static const struct { const char *name; int policy; } policies[] = {
	{ "best-effort", GPU_SCHED_BEST_EFFORT },
	{ "equal-share", GPU_SCHED_EQUAL_SHARE },
	{ "fixed-share", GPU_SCHED_FIXED_SHARE },
};

static int parse_policy(const char *v, int *out)
{
	for (unsigned int i = 0; i < 3; i++) {
		if (!strcasecmp(v, policies[i].name)) {
			*out = policies[i].policy;
			return 0;
		}
	}
	return -EINVAL;
}

static bool policy_valid(int policy)
{
	for (unsigned int i = 0; i < 3; i++)
		if (policies[i].policy == policy)
			return true;
	return false;
}

/* A switch: true/false, yes/no, on/off or 1/0, in any case. Anything else is refused
 * rather than read as off: a mistyped "ture" must not leave a reservation silently off. */
static int parse_bool(const char *v, bool *out)
{
	static const char *const on[] = { "true", "yes", "on", "1" };
	static const char *const off[] = { "false", "no", "off", "0" };

	for (unsigned int i = 0; v && i < 4; i++) {
		if (!strcasecmp(v, on[i]) || !strcasecmp(v, off[i])) {
			*out = !strcasecmp(v, on[i]);
			return 0;
		}
	}
	return -EINVAL;
}

static bool size_valid(const struct cfg_key *k, uint64_t v)
{
	return v % PF_VRAM_ALIGN == 0 && v >= k->min && v <= k->max;
}

/* Whether @v suits string key @k. A model name is a part of every type name, so it takes
 * only what such a name may hold and no leading '-' (an option) or '.' (a hidden file). */
static bool str_valid(const struct cfg_key *k, const char *v)
{
	size_t n = strlen(v);

	if (n < k->min || n > k->max)
		return false;
	switch (k->kind) {
	case K_NAME:
		return isalnum((unsigned char)v[0]) &&
		       strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
			      "0123456789._-") == n;
	case K_TEXT:
		for (; *v; v++)
			if ((unsigned char)*v < 0x20 || *v == 0x7f)
				return false;
		return true;
	case K_DIR:
		return v[0] == '/';
	default:
		return true;
	}
}

/* Parse @v into @k's field of @c, which is left as it was on error. */
static int key_parse(struct pf_config *c, const struct cfg_key *k, const char *v)
{
	void *p = (char *)c + k->off;
	unsigned int u;
	uint64_t sz;
	int r;

	if (!v)
		return -EINVAL;
	switch (k->kind) {
	case K_COUNT:
	case K_MS:
		r = parse_uint(v, k->max, &u);
		if (!r && u < k->min)
			r = -ERANGE;
		if (!r)
			*(unsigned int *)p = k->kind == K_MS ? u * 1000 : u;
		return r;
	case K_SIZE:
		r = ctlc_size_parse(v, &sz);
		if (!r && !size_valid(k, sz))
			r = -ERANGE;
		if (!r)
			*(uint64_t *)p = sz;
		return r;
	case K_NAME:
	case K_TEXT:
	case K_GROUP:
	case K_DIR:
		if (!str_valid(k, v))
			return -EINVAL;
		snprintf(p, k->size, "%s", v);
		return 0;
	case K_MODE:
		return parse_mode(v, p);
	case K_BOOL:
		return parse_bool(v, p);
	case K_POLICY:
		return parse_policy(v, p);
	}
	return -EINVAL;
}

/* Whether @k's field of @c holds a value the key takes (a struct filled by other means
 * than pf_config_set() included). */
static bool key_valid(const struct pf_config *c, const struct cfg_key *k)
{
	const void *p = (const char *)c + k->off;
	unsigned int u = k->size == sizeof(u) ? *(const unsigned int *)p : 0;

	switch (k->kind) {
	case K_COUNT:
		return u >= k->min && u <= k->max;
	case K_SIZE:
		return size_valid(k, *(const uint64_t *)p);
	case K_NAME:
	case K_TEXT:
	case K_GROUP:
	case K_DIR:
		return memchr(p, 0, k->size) && str_valid(k, p);
	case K_MODE:
		return u <= k->max;
	case K_POLICY:
		return policy_valid(*(const int *)p);
	case K_MS:		/* its field is quantum_us's, judged there */
	case K_BOOL:
		return true;
	}
	return false;
}

int pf_config_set(struct pf_config *c, const char *section, const char *k, const char *v)
{
	const struct cfg_key *key = key_find(section, k);
	int r;

	if (!key)
		return -ENOENT;
	r = key_parse(c, key, v);
	if (!r)
		c->line[key->slot] = 0;	/* a flag's: no line of the file to name */
	return r;
}

const char *pf_config_expect(const char *section, const char *key)
{
	const struct cfg_key *k = key_find(section, key);

	return k ? k->form : NULL;
}

/* ---- the file ----------------------------------------------------------------------------- */

/* The INI file, read a physical line at a time through inih's reader hook, so that a line
 * number is a line's: inih counts reads, and would take a line longer than its buffer in
 * two. The reader refuses what inih would take silently otherwise, and stops the parse at
 * the first refusal (inih goes on after an error). */
struct ini_ctx {
	struct pf_config cfg;
	FILE *f;
	char *buf;			/* the physical line (getline's) */
	size_t cap;
	unsigned int line;		/* its number */
	unsigned int err_line;		/* the first refusal: where, and why in @why */
	int read_err;			/* the read that failed: -errno */
	const struct cfg_key *as[S_NR];	/* the spelling that set each setting */
	char why[512];
};

static void __attribute__((format(printf, 2, 3))) refuse(struct ini_ctx *x, const char *fmt,
							  ...)
{
	va_list ap;

	if (x->err_line)
		return;
	va_start(ap, fmt);
	vsnprintf(x->why, sizeof(x->why), fmt, ap);
	va_end(ap);
	x->err_line = x->line;
}

/* inih reads a line that starts with white space after a key as more of that key's value
 * (INI_ALLOW_MULTILINE), a key or section header there included, without a word; no such
 * value is wanted here, so an indented line is refused. Blank and comment lines may be. */
static bool indented(const char *s)
{
	if (!isspace((unsigned char)*s))
		return false;
	while (isspace((unsigned char)*s))
		s++;
	return *s && !strchr(INI_START_COMMENT_PREFIXES, *s);
}

static char *ini_read(char *str, int num, void *stream)
{
	struct ini_ctx *x = stream;
	const char *s;
	ssize_t n;

	if (x->err_line || x->read_err)
		return NULL;
	errno = 0;
	n = getline(&x->buf, &x->cap, x->f);
	if (n < 0) {
		if (ferror(x->f))
			x->read_err = errno ? -errno : -EIO;
		return NULL;
	}
	x->line++;
	if (n && x->buf[n - 1] == '\n')
		x->buf[--n] = 0;
	s = x->buf;
	if (x->line == 1 && !strncmp(s, "\xef\xbb\xbf", 3))
		s += 3;		/* a byte-order mark, which inih skips */
	if (strlen(x->buf) != (size_t)n)
		refuse(x, "holds a NUL byte");
	else if (n >= num)
		refuse(x, "line too long (at most %d characters)", num - 1);
	else if (indented(s))
		refuse(x, "indented line (continuation lines are not supported)");
	if (x->err_line)
		return NULL;
	memcpy(str, x->buf, (size_t)n + 1);
	return str;
}

static int ini_cb(void *user, const char *section, const char *name, const char *value)
{
	struct ini_ctx *x = user;
	const struct cfg_key *k = key_find(section, name), *first;

	if (!k) {
		refuse(x, "[%s] %s = %s: unknown key", section, name, value);
		return 0;
	}
	first = x->as[k->slot];
	if (first) {
		refuse(x, "[%s] %s: set twice (first at line %u%s%s)", section, name,
		       x->cfg.line[k->slot], first != k ? ", as " : "",
		       first != k ? first->name : "");
		return 0;
	}
	if (key_parse(&x->cfg, k, value)) {
		refuse(x, "[%s] %s = %s: bad value (%s)", section, name, value, k->form);
		return 0;
	}
	x->cfg.line[k->slot] = x->line;
	x->as[k->slot] = k;
	return 1;
}

/* Open @path for reading, without waiting on a FIFO: 0, or -errno and @err. */
static int ini_open(struct ini_ctx *x, const char *path, char *err, size_t errlen)
{
	struct stat sb;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK), r;

	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(-r));
		return r;
	}
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
		snprintf(err, errlen, "%s: not a regular file", path);
		close(fd);
		return -EINVAL;
	}
	x->f = fdopen(fd, "r");
	if (!x->f) {
		r = -errno;
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(-r));
		close(fd);
		return r;
	}
	return 0;
}

int pf_config_load(struct pf_config *cfg, const char *path, char *err, size_t errlen)
{
	struct ini_ctx *x = calloc(1, sizeof(*x));
	int r;

	if (!x) {
		snprintf(err, errlen, "%s: out of memory", path);
		return -ENOMEM;
	}
	r = ini_open(x, path, err, errlen);
	if (r)
		goto free_x;
	x->cfg = *cfg;
	memset(x->cfg.line, 0, sizeof(x->cfg.line));
	snprintf(x->cfg.file, sizeof(x->cfg.file), "%s", path);
	r = ini_parse_stream(ini_read, x, ini_cb, x);
	/* inih returns the line of its first error, a syntax error or the handler's refusal;
	 * the reader stopped it at the first refusal of its own. */
	if (r > 0 && (!x->err_line || (unsigned int)r < x->err_line))
		snprintf(err, errlen, "%s: line %d: syntax error", path, r);
	else if (x->err_line)
		snprintf(err, errlen, "%s: line %u: %s", path, x->err_line, x->why);
	else if (x->read_err)
		snprintf(err, errlen, "%s: read error: %s", path, strerror(-x->read_err));
	else if (r)
		snprintf(err, errlen, "%s: cannot be parsed (%d)", path, r);
	r = (r || x->err_line || x->read_err) ? -EINVAL : 0;
	if (!r)
		*cfg = x->cfg;
	fclose(x->f);
free_x:
	free(x->buf);
	free(x);
	return r;
}

/* ---- the whole configuration -------------------------------------------------------------- */

/* @err: "FILE: line N: [section] key: " where the file set @slot, else "[section] key: ",
 * then the message. -EINVAL. */
static int __attribute__((format(printf, 5, 6)))
check_fail(const struct pf_config *c, enum cfg_slot slot, char *err, size_t errlen,
	   const char *fmt, ...)
{
	const struct cfg_key *k = slot_key(slot);
	char why[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (c->line[slot])
		snprintf(err, errlen, "%s: line %u: [%s] %s: %s", c->file, c->line[slot],
			 k->section, k->name, why);
	else
		snprintf(err, errlen, "[%s] %s: %s", k->section, k->name, why);
	return -EINVAL;
}

/* Setting @a (value @va) must be @rel_a setting @b (value @vb): refused naming @a, or @b
 * (as @rel_b @a) when only @b came from the file, since that is the line to change. */
static int check_pair(const struct pf_config *c, enum cfg_slot a, const char *va,
		      const char *rel_a, enum cfg_slot b, const char *vb, const char *rel_b,
		      char *err, size_t errlen)
{
	const struct cfg_key *ka = slot_key(a), *kb = slot_key(b);

	if (c->line[a] || !c->line[b])
		return check_fail(c, a, err, errlen, "%s must be %s [%s] %s (%s)", va, rel_a,
				  kb->section, kb->name, vb);
	return check_fail(c, b, err, errlen, "%s must be %s [%s] %s (%s)", vb, rel_b,
			  ka->section, ka->name, va);
}

int pf_config_check(const struct pf_config *c, char *err, size_t errlen)
{
	char a[32], b[32];

	for (size_t i = 0; i < NR_KEYS; i++)
		if (!key_valid(c, &keys[i]))
			return check_fail(c, keys[i].slot, err, errlen, "bad value (%s)",
					  keys[i].form);
	if (c->spare_vram >= c->vram_size)
		return check_pair(c, S_SPARE_VRAM, ctlc_size_format(c->spare_vram, a, sizeof(a)),
				  "below", S_VRAM, ctlc_size_format(c->vram_size, b, sizeof(b)),
				  "above", err, errlen);
	if (c->num_vfs > c->max_vfs) {
		snprintf(a, sizeof(a), "%u", c->num_vfs);
		snprintf(b, sizeof(b), "%u", c->max_vfs);
		return check_pair(c, S_NUM_VFS, a, "at most", S_MAX_VFS, b, "at least", err,
				  errlen);
	}
	if (c->spare_channels >= c->channels) {
		snprintf(a, sizeof(a), "%u", c->spare_channels);
		snprintf(b, sizeof(b), "%u", c->channels);
		return check_pair(c, S_SPARE_CHANNELS, a, "below", S_CHANNELS, b, "above", err,
				  errlen);
	}
	if (c->spare_doorbells >= c->doorbells) {
		snprintf(a, sizeof(a), "%u", c->spare_doorbells);
		snprintf(b, sizeof(b), "%u", c->doorbells);
		return check_pair(c, S_SPARE_DOORBELLS, a, "below", S_DOORBELLS, b, "above", err,
				  errlen);
	}
	if (c->admin_group[0] && !getgrnam(c->admin_group))
		return check_fail(c, S_ADMIN_GROUP, err, errlen, "group %s does not exist",
				  c->admin_group);
	return 0;
}

// SPDX-License-Identifier: MIT
/* Configuration: defaults, the INI file (inih) and single keys set by flags. */
#include <errno.h>
#include <grp.h>
#include <stdbool.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

/* A count in decimal: a leading 0 does not make it octal, as it would for strtoul base 0. */
static int parse_uint(const char *v, unsigned int max, unsigned int *out)
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

static int parse_policy(const char *v, int *out)
{
	static const struct { const char *name; int policy; } p[] = {
		{ "best-effort", GPU_SCHED_BEST_EFFORT },
		{ "equal-share", GPU_SCHED_EQUAL_SHARE },
		{ "fixed-share", GPU_SCHED_FIXED_SHARE },
	};

	for (unsigned int i = 0; i < 3; i++) {
		if (!strcasecmp(v, p[i].name)) {
			*out = p[i].policy;
			return 0;
		}
	}
	return -EINVAL;
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

static int set_str(char *dst, size_t len, const char *v)
{
	if (strlen(v) >= len)
		return -ENAMETOOLONG;
	snprintf(dst, len, "%s", v);
	return 0;
}

static int set_gpu(struct pf_config *c, const char *k, const char *v)
{
	if (!strcmp(k, "model"))
		return set_str(c->model, sizeof(c->model), v);
	if (!strcmp(k, "vram"))
		return ctlc_size_parse(v, &c->vram_size);
	if (!strcmp(k, "engines"))
		return parse_uint(v, GPU_MAX_ENGINES, &c->engines);
	if (!strcmp(k, "channels"))
		return parse_uint(v, 1u << 20, &c->channels);
	if (!strcmp(k, "doorbells"))
		return parse_uint(v, 1u << 20, &c->doorbells);
	return -ENOENT;
}

static int set_pf(struct pf_config *c, const char *k, const char *v)
{
	if (!strcmp(k, "id"))
		return set_str(c->pf_id, sizeof(c->pf_id), v);
	if (!strcmp(k, "max_vfs"))
		return parse_uint(v, PF_MAX_VFS, &c->max_vfs);
	if (!strcmp(k, "num_vfs"))
		return parse_uint(v, PF_MAX_VFS, &c->num_vfs);
	if (!strcmp(k, "spare_vram"))
		return ctlc_size_parse(v, &c->spare_vram);
	if (!strcmp(k, "spare_channels"))
		return parse_uint(v, 1u << 20, &c->spare_channels);
	if (!strcmp(k, "spare_doorbells"))
		return parse_uint(v, 1u << 20, &c->spare_doorbells);
	if (!strcmp(k, "dma_size"))
		return ctlc_size_parse(v, &c->dma_size);
	if (!strcmp(k, "reset_evict_ms"))
		return parse_uint(v, PF_RESET_EVICT_MS_MAX, &c->reset_evict_ms);
	if (!strcmp(k, "vram_prealloc"))
		return parse_bool(v, &c->vram_prealloc);
	return -ENOENT;
}

int pf_config_set(struct pf_config *c, const char *section, const char *k, const char *v)
{
	if (!strcmp(section, "gpu"))
		return set_gpu(c, k, v);
	if (!strcmp(section, "pf"))
		return set_pf(c, k, v);
	if (!strcmp(section, "sched") && !strcmp(k, "policy"))
		return parse_policy(v, &c->sched_policy);
	if (!strcmp(section, "sched") && !strcmp(k, "quantum_us"))
		return parse_uint(v, PF_SCHED_QUANTUM_US_MAX, &c->sched_quantum_us);
	if (!strcmp(section, "sched") && !strcmp(k, "quantum_ms")) {
		/* The same setting in whole milliseconds. */
		int r = parse_uint(v, PF_SCHED_QUANTUM_US_MAX / 1000, &c->sched_quantum_us);

		if (!r)
			c->sched_quantum_us *= 1000;
		return r;
	}
	if (!strcmp(section, "paths") && !strcmp(k, "runtime_dir"))
		return set_str(c->runtime_dir, sizeof(c->runtime_dir), v);
	if (!strcmp(section, "paths") && !strcmp(k, "state_dir"))
		return set_str(c->state_dir, sizeof(c->state_dir), v);
	if (!strcmp(section, "control") && !strcmp(k, "admin_group"))
		return set_str(c->admin_group, sizeof(c->admin_group), v);
	if (!strcmp(section, "control") && !strcmp(k, "socket_mode"))
		return parse_mode(v, &c->socket_mode);
	if (!strcmp(section, "control") && !strcmp(k, "max_line"))
		return parse_uint(v, 16u << 20, &c->max_line);
	if (!strcmp(section, "control") && !strcmp(k, "admin_slots"))
		return parse_uint(v, PF_MAX_CLIENTS - 1, &c->admin_slots);
	if (!strcmp(section, "control") && !strcmp(k, "per_uid"))
		return parse_uint(v, PF_MAX_CLIENTS, &c->per_uid);
	if (!strcmp(section, "control") && !strcmp(k, "negotiate_timeout_ms"))
		return parse_uint(v, 3600000, &c->negotiate_ms);
	return -ENOENT;
}

const char *pf_config_expect(const char *section, const char *key)
{
	if (!strcmp(section, "control") && !strcmp(key, "socket_mode"))
		return "an octal mode, 0 to 0777";
	if (!strcmp(section, "pf") && !strcmp(key, "vram_prealloc"))
		return "true or false; yes/no, on/off and 1/0 also do";
	return NULL;
}

/* The INI file, read through inih's reader hook so that the handler knows its line: inih
 * counts reads, not lines (a line longer than its buffer takes two), and goes on after an
 * error, so neither its count nor the last handler error would name the right one. */
struct ini_ctx {
	struct pf_config cfg;
	FILE *f;
	int reads, line;		/* inih's count and the physical line */
	bool line_start;		/* the next read starts a line */
	int err_read, err_line;		/* the first refused key: where, and why in @why */
	char why[256];
};

static char *ini_read(char *str, int num, void *stream)
{
	struct ini_ctx *x = stream;
	char *p;

	x->line += x->line_start;
	p = fgets(str, num, x->f);
	if (p) {
		x->reads++;
		x->line_start = strchr(str, '\n') != NULL;
	}
	return p;
}

static int ini_cb(void *user, const char *section, const char *key, const char *value)
{
	struct ini_ctx *x = user;
	int ret = pf_config_set(&x->cfg, section, key, value);

	if (ret && !x->err_read) {
		const char *expect = pf_config_expect(section, key);

		snprintf(x->why, sizeof(x->why), "[%s] %s = %s: %s%s%s%s", section, key, value,
			 ret == -ENOENT ? "unknown key" : "bad value", expect ? " (" : "",
			 expect ? expect : "", expect ? ")" : "");
		x->err_read = x->reads;
		x->err_line = x->line;
	}
	return !ret;
}

/* The physical line of inih's read number @n of @f (for a syntax error it reports). */
static int read_line(FILE *f, int n)
{
	struct ini_ctx x = { .f = f, .line_start = true };
	char buf[INI_MAX_LINE];

	rewind(f);
	while (x.reads < n && ini_read(buf, sizeof(buf), &x))
		;
	return x.line;
}

int pf_config_load(struct pf_config *cfg, const char *path, char *err, size_t errlen)
{
	struct ini_ctx x = { .cfg = *cfg, .line_start = true };
	int r;

	x.f = fopen(path, "re");
	if (!x.f) {
		snprintf(err, errlen, "cannot open %s", path);
		return -ENOENT;
	}
	r = ini_parse_stream(ini_read, &x, ini_cb, &x);
	/* inih returns its read number of the first error, a handler's refusal or a syntax
	 * error, whichever came first. */
	if (r > 0 && r == x.err_read)
		snprintf(err, errlen, "%s: line %d: %s", path, x.err_line, x.why);
	else if (r > 0)
		snprintf(err, errlen, "%s: line %d: syntax error", path, read_line(x.f, r));
	fclose(x.f);
	if (r)
		return -EINVAL;
	*cfg = x.cfg;
	return 0;
}

int pf_config_check(const struct pf_config *c, char *err, size_t errlen)
{
	const char *why = NULL;

	if (!c->vram_size || c->vram_size % PF_VRAM_ALIGN)
		why = "vram must be a non-zero multiple of 2 MiB";
	else if (c->vram_size > (1ull << 40))
		why = "vram is larger than 1 TiB";
	else if (c->spare_vram % PF_VRAM_ALIGN || c->spare_vram >= c->vram_size)
		why = "spare_vram must be a multiple of 2 MiB below vram";
	else if (!c->max_vfs || c->max_vfs > PF_MAX_VFS)
		why = "max_vfs must be 1..63";
	else if (c->num_vfs > c->max_vfs)
		why = "num_vfs is above max_vfs";
	else if (c->spare_channels >= c->channels || c->spare_doorbells >= c->doorbells)
		why = "the PF spare takes every channel or doorbell";
	else if (!c->dma_size || c->dma_size % PF_VRAM_ALIGN || c->dma_size > (1ull << 30))
		why = "dma_size must be a multiple of 2 MiB up to 1 GiB";
	else if (!c->engines)
		why = "engines must be 1..4";
	else if (!c->max_line || c->max_line < 1024)
		why = "max_line is below 1024";
	else if (!c->per_uid || !c->negotiate_ms)
		why = "per_uid and negotiate_timeout_ms must be at least 1";
	else if (c->admin_group[0] && !getgrnam(c->admin_group))
		why = "admin_group does not exist";
	if (!why)
		return 0;
	snprintf(err, errlen, "%s", why);
	return -EINVAL;
}

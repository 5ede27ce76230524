// SPDX-License-Identifier: MIT
/* pf_manager unit tests: size and UUID parsing, fair-share provisioning, configuration, and
 * the capabilities the systemd units leave vgpud. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "ctlclient/ctlclient.h"
#include "pf_manager/pf_manager.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

/* ---- sizes ---- */
static const struct size_case {
	const char *name, *in;
	int want;
	uint64_t bytes;
} size_cases[] = {
	{ "plain bytes", "4096", 0, 4096 },
	{ "G", "4G", 0, 4 * GiB },
	{ "GiB", "4GiB", 0, 4 * GiB },
	{ "GB is IEC too", "4GB", 0, 4 * GiB },
	{ "lower-case m", "512m", 0, 512 * MiB },
	{ "T", "1T", 0, 1024 * GiB },
	{ "space before unit", "16 G", 0, 16 * GiB },
	{ "zero", "0", 0, 0 },
	{ "empty", "", -EINVAL, 0 },
	{ "negative", "-1G", -EINVAL, 0 },
	{ "fraction", "1.5G", -EINVAL, 0 },
	{ "unknown unit", "12X", -EINVAL, 0 },
	{ "trailing garbage", "4Gx", -EINVAL, 0 },
	{ "unit only", "G", -EINVAL, 0 },
	{ "overflow in unit", "99999999999T", -ERANGE, 0 },
	{ "overflow in digits", "999999999999999999999999", -ERANGE, 0 },
};

static void test_size(void **state)
{
	const struct size_case *c = *state;
	uint64_t v = 0xdead;

	assert_int_equal(ctlc_size_parse(c->in, &v), c->want);
	if (!c->want)
		assert_true(v == c->bytes);
	else
		assert_true(v == 0xdead);	/* untouched on error */
}

static void test_format_size(void **state)
{
	char b[32];

	(void)state;
	assert_string_equal(ctlc_size_format(4 * GiB, b, sizeof(b)), "4 GiB");
	assert_string_equal(ctlc_size_format(512 * MiB, b, sizeof(b)), "512 MiB");
	assert_string_equal(ctlc_size_format(GiB + GiB / 2, b, sizeof(b)), "1.5 GiB");
	assert_string_equal(ctlc_size_format(100, b, sizeof(b)), "100 B");
}

/* ---- UUIDs ---- */
static const struct uuid_case {
	const char *name, *in;
	int want;
	const char *norm;
} uuid_cases[] = {
	{ "lower", "c2177883-f1bb-47f0-914d-32a22e3a8804", 0, "c2177883-f1bb-47f0-914d-32a22e3a8804" },
	{ "upper normalised", "C2177883-F1BB-47F0-914D-32A22E3A8804", 0,
	  "c2177883-f1bb-47f0-914d-32a22e3a8804" },
	{ "short", "c2177883-f1bb-47f0-914d-32a22e3a880", -EINVAL, NULL },
	{ "long", "c2177883-f1bb-47f0-914d-32a22e3a88041", -EINVAL, NULL },
	{ "bad hex", "g2177883-f1bb-47f0-914d-32a22e3a8804", -EINVAL, NULL },
	{ "dash misplaced", "c2177883f-1bb-47f0-914d-32a22e3a8804", -EINVAL, NULL },
	{ "empty", "", -EINVAL, NULL },
};

static void test_uuid(void **state)
{
	const struct uuid_case *c = *state;
	char out[PF_UUID_STR] = "";
	uint8_t b[16];

	assert_int_equal(ctlc_uuid_parse(c->in, out, b), c->want);
	if (!c->want) {
		assert_string_equal(out, c->norm);
		assert_int_equal(b[0], 0xc2);
		assert_int_equal(b[15], 0x04);
	}
}

static void test_uuid_generate(void **state)
{
	char a[PF_UUID_STR], b[PF_UUID_STR];

	(void)state;
	ctlc_uuid_generate(a);
	ctlc_uuid_generate(b);
	assert_int_equal(ctlc_uuid_parse(a, NULL, NULL), 0);
	assert_string_not_equal(a, b);
	assert_int_equal(a[14], '4');		/* version 4 */
	assert_non_null(strchr("89ab", a[19]));	/* RFC 4122 variant */
}

/* ---- fair share (xe's auto-provisioning), over 1..63 VFs ---- */
static void test_fair_vram(void **state)
{
	uint64_t usable = 16 * GiB - 512 * MiB;

	(void)state;
	for (unsigned int n = 1; n <= 63; n++) {
		uint64_t each = pf_fair_vram(usable, n);

		assert_true(each && !(each & (each - 1)));	/* power of two */
		assert_true(each % (2 * MiB) == 0);		/* 2 MiB aligned */
		assert_true(each * n <= usable);		/* PF spare kept */
		assert_true(each * 2 * n > usable);		/* and not more than halved */
	}
	assert_true(pf_fair_vram(usable, 1) == 8 * GiB);
	assert_true(pf_fair_vram(usable, 63) == 128 * MiB);
	assert_true(pf_fair_vram(4 * MiB, 4) == 0);		/* below 2 MiB each */
	assert_true(pf_fair_vram(usable, 0) == 0);
}

/* ---- configuration ---- */
/* An error names the line and key of the first one, a syntax error included, even when
 * later lines hold more errors (inih goes on after one). */
static const struct ini_case {
	const char *name, *text;
	int want;
	uint64_t vram;
	unsigned int max_vfs;
	unsigned int mode;	/* socket_mode wanted; 0: the default 0660 */
	const char *msg;	/* the error's text after the file name */
} ini_cases[] = {
	{ "full file",
	  "[gpu]\nmodel = a100\nvram = 8G\n[pf]\nmax_vfs = 7\nspare_vram = 256M\n"
	  "[sched]\npolicy = equal-share\n[paths]\nruntime_dir = /tmp/r\n",
	  0, 8 * GiB, 7, 0, NULL },
	{ "empty file", "", 0, 16 * GiB, 63, 0, NULL },
	{ "unknown key", "[gpu]\ncolour = red\n", -EINVAL, 0, 0, 0,
	  "line 2: [gpu] colour = red: unknown key" },
	{ "bad size", "[gpu]\nvram = lots\n", -EINVAL, 0, 0, 0,
	  "line 2: [gpu] vram = lots: bad value" },
	{ "max_vfs too big", "[pf]\nmax_vfs = 64\n", -EINVAL, 0, 0, 0,
	  "line 2: [pf] max_vfs = 64" },
	{ "unknown policy", "[sched]\npolicy = lottery\n", -EINVAL, 0, 0, 0,
	  "line 2: [sched] policy" },
	{ "syntax error", "[gpu\nvram = 4G\n", -EINVAL, 0, 0, 0, "line 1: syntax error" },
	{ "first of two bad keys", "[gpu]\nbogus = 1\nvram = 8G\n[pf]\nmax_vfs = 99\n", -EINVAL, 0,
	  0, 0, "line 2: [gpu] bogus = 1: unknown key" },
	{ "syntax error before a bad key", "[gpu]\nvram 8G\n[pf]\nmax_vfs = 99\n", -EINVAL, 0, 0, 0,
	  "line 2: syntax error" },
	{ "bad key before a syntax error", "[pf]\nmax_vfs = 99\n[gpu]\nvram 8G\n", -EINVAL, 0, 0, 0,
	  "line 2: [pf] max_vfs = 99: bad value" },
	{ "a comment line is counted", "; vgpud\n\n[pf]\n; spare\nmax_vfs = 99\n", -EINVAL, 0, 0, 0,
	  "line 5: [pf] max_vfs = 99" },
	{ "count with a leading 0 is decimal", "[pf]\nmax_vfs = 010\n", 0, 16 * GiB, 10, 0, NULL },
	{ "count in hex", "[pf]\nmax_vfs = 0x10\n", -EINVAL, 0, 0, 0, "line 2: [pf] max_vfs" },
	{ "socket_mode without its 0", "[control]\nsocket_mode = 660\n", 0, 16 * GiB, 63, 0660,
	  NULL },
	{ "socket_mode 220", "[control]\nsocket_mode = 220\n", 0, 16 * GiB, 63, 0220, NULL },
	{ "socket_mode 0640", "[control]\nsocket_mode = 0640\n", 0, 16 * GiB, 63, 0640, NULL },
	{ "socket_mode with an 8", "[control]\nsocket_mode = 0680\n", -EINVAL, 0, 0, 0,
	  "line 2: [control] socket_mode = 0680: bad value (an octal mode, 0 to 0777)" },
	{ "socket_mode above 0777", "[control]\nsocket_mode = 1777\n", -EINVAL, 0, 0, 0,
	  "line 2: [control] socket_mode = 1777: bad value (an octal mode, 0 to 0777)" },
	{ "socket_mode empty", "[control]\nsocket_mode =\n", -EINVAL, 0, 0, 0,
	  "line 2: [control] socket_mode = : bad value" },
};

static void test_ini(void **state)
{
	const struct ini_case *c = *state;
	char path[] = "/tmp/pf-ini-XXXXXX", err[256] = "", want[300];
	struct pf_config cfg, before;
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, c->text, strlen(c->text)), (ssize_t)strlen(c->text));
	close(fd);
	pf_config_defaults(&cfg);
	before = cfg;
	assert_int_equal(pf_config_load(&cfg, path, err, sizeof(err)), c->want);
	unlink(path);
	if (c->want) {
		snprintf(want, sizeof(want), "%s: %s", path, c->msg);
		if (strncmp(err, want, strlen(want)))
			fail_msg("%s: the error is \"%s\", not \"%s\"", c->name, err, want);
		assert_memory_equal(&cfg, &before, sizeof(cfg));	/* and changed nothing */
		return;
	}
	assert_true(cfg.vram_size == c->vram);
	assert_int_equal(cfg.max_vfs, c->max_vfs);
	assert_int_equal(cfg.socket_mode, c->mode ? c->mode : 0660);
	assert_false(cfg.vram_prealloc);	/* off unless set */
}

/* [pf] vram_prealloc: a switch in any of its spellings; anything else is refused naming the
 * key and what it takes, and changes nothing. */
static const struct prealloc_case {
	const char *name, *value;
	int want;
	bool on;
} prealloc_cases[] = {
	{ "vram_prealloc true", "true", 0, true },
	{ "vram_prealloc On", "On", 0, true },
	{ "vram_prealloc 1", "1", 0, true },
	{ "vram_prealloc YES", "YES", 0, true },
	{ "vram_prealloc no", "no", 0, false },
	{ "vram_prealloc off", "off", 0, false },
	{ "vram_prealloc 0", "0", 0, false },
	{ "vram_prealloc maybe", "maybe", -EINVAL, false },
	{ "vram_prealloc empty", "", -EINVAL, false },
	{ "vram_prealloc truer", "truer", -EINVAL, false },
	{ "vram_prealloc 2", "2", -EINVAL, false },
};

static void test_prealloc(void **state)
{
	const struct prealloc_case *c = *state;
	char path[] = "/tmp/pf-ini-XXXXXX", err[256] = "", text[64], want[300];
	struct pf_config cfg, before;
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	snprintf(text, sizeof(text), "[pf]\nvram_prealloc = %s\n", c->value);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	pf_config_defaults(&cfg);
	before = cfg;
	assert_int_equal(pf_config_load(&cfg, path, err, sizeof(err)), c->want);
	unlink(path);
	if (c->want) {
		snprintf(want, sizeof(want), "%s: line 2: [pf] vram_prealloc = %s: bad value (true "
			 "or false; yes/no, on/off and 1/0 also do)", path, c->value);
		assert_string_equal(err, want);
		assert_memory_equal(&cfg, &before, sizeof(cfg));
		assert_int_equal(pf_config_set(&cfg, "pf", "vram_prealloc", c->value), -EINVAL);
		return;
	}
	assert_int_equal(cfg.vram_prealloc, c->on);
}

static void test_ini_missing(void **state)
{
	struct pf_config cfg;
	char err[256];

	(void)state;
	pf_config_defaults(&cfg);
	assert_int_equal(pf_config_load(&cfg, "/nonexistent/vgpud.conf", err, sizeof(err)), -ENOENT);
}

/* A value wrong in itself is refused when it is set (-ERANGE), one wrong beside the others
 * by the check (-EINVAL). */
static const struct check_case {
	const char *name, *section, *key, *value;
	int set, want;
} check_cases[] = {
	{ "defaults", NULL, NULL, NULL, 0, 0 },
	{ "vram not 2M aligned", "gpu", "vram", "3M", -ERANGE, 0 },
	{ "spare above vram", "pf", "spare_vram", "32G", 0, -EINVAL },
	{ "num_vfs above max", "pf", "num_vfs", "63", 0, 0 },
	{ "no such admin group", "control", "admin_group", "no-such-group-xyz", 0, -EINVAL },
	{ "dma not aligned", "pf", "dma_size", "1M", -ERANGE, 0 },
};

static void test_check(void **state)
{
	const struct check_case *c = *state;
	struct pf_config cfg;
	char err[256] = "";

	pf_config_defaults(&cfg);
	if (c->section)
		assert_int_equal(pf_config_set(&cfg, c->section, c->key, c->value), c->set);
	assert_int_equal(pf_config_check(&cfg, err, sizeof(err)), c->want);
	if (c->want)
		assert_true(err[0]);
}

/* ---- the systemd units ---- */
/* @buf: the path of dist/@name, from this file's (the build and the tests run at the tree's
 * root, where a relative __FILE__ starts). */
static void dist_path(char *buf, size_t len, const char *name)
{
	const char *slash = strrchr(__FILE__, '/');
	int dir = slash ? (int)(slash - __FILE__) : 1;

	snprintf(buf, len, "%.*s/../../../dist/%s", dir, slash ? __FILE__ : ".", name);
}

/* Whether the setting @key of unit file @path lists @want (every @key= line counts, as systemd
 * adds them up; an empty assignment resets the list). */
static bool unit_lists(const char *path, const char *key, const char *want)
{
	char line[1024], *tok, *save, *v;
	size_t klen = strlen(key);
	bool found = false;
	FILE *f = fopen(path, "r");

	if (!f)
		fail_msg("%s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, key, klen) || line[klen] != '=')
			continue;
		v = line + klen + 1;
		if (!v[strspn(v, " \t\n")])
			found = false;
		for (tok = strtok_r(v, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save))
			found |= !strcmp(tok, want);
	}
	fclose(f);
	return found;
}

/* vgpud runs as root inside the units' capability bounding set; its service threads go back to
 * nice 0 from CMN_SHARE_NICE_BUSY, which needs CAP_SYS_NICE (common/share.c). Without it a VF
 * once served busy would stay behind the others for good. */
static void test_units_capabilities(void **state)
{
	static const char *const units[] = { "vgpud.service.in", "vgpud@.service.in" };
	static const char *const caps[] = {
		"CAP_CHOWN", "CAP_FOWNER", "CAP_DAC_OVERRIDE", "CAP_KILL", "CAP_SYS_NICE",
	};
	char path[512];

	(void)state;
	for (size_t u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
		dist_path(path, sizeof(path), units[u]);
		for (size_t c = 0; c < sizeof(caps) / sizeof(caps[0]); c++)
			if (!unit_lists(path, "CapabilityBoundingSet", caps[c]))
				fail_msg("%s: CapabilityBoundingSet lacks %s", units[u], caps[c]);
	}
}

#define CASE(fn, arr, i) { arr[i].name, fn, NULL, NULL, (void *)&arr[i] }

int main(void)
{
	struct CMUnitTest t[80];
	size_t n = 0;

	for (size_t i = 0; i < sizeof(size_cases) / sizeof(size_cases[0]); i++)
		t[n++] = (struct CMUnitTest)CASE(test_size, size_cases, i);
	for (size_t i = 0; i < sizeof(uuid_cases) / sizeof(uuid_cases[0]); i++)
		t[n++] = (struct CMUnitTest)CASE(test_uuid, uuid_cases, i);
	for (size_t i = 0; i < sizeof(ini_cases) / sizeof(ini_cases[0]); i++)
		t[n++] = (struct CMUnitTest)CASE(test_ini, ini_cases, i);
	for (size_t i = 0; i < sizeof(check_cases) / sizeof(check_cases[0]); i++)
		t[n++] = (struct CMUnitTest)CASE(test_check, check_cases, i);
	for (size_t i = 0; i < sizeof(prealloc_cases) / sizeof(prealloc_cases[0]); i++)
		t[n++] = (struct CMUnitTest)CASE(test_prealloc, prealloc_cases, i);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_format_size);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_uuid_generate);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_fair_vram);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_ini_missing);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_units_capabilities);
	return _cmocka_run_group_tests("pf_units", t, n, NULL, NULL);
}

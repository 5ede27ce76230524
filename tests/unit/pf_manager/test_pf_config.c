// SPDX-License-Identifier: MIT
/* vgpud's configuration file, refused clearly: pf_config_load() on files inih would take
 * silently or half (an indented line, a key twice, a line over inih's buffer, a NUL byte),
 * on what is not a readable regular file, and on values out of their range (the message
 * gives the range); pf_config_check() names the file, line and key of the setting at fault,
 * or the key alone for a flag's or a default. Every key's form matches the values it
 * takes. The real vgpud exits 2 on such a file and creates neither of its directories. */
/* pf_test.h's t_connect() copies a socket path that GCC, inlining it into the one start
 * here, sees as up to 159 bytes for sun_path's 108; the paths are /dev/shm/vgpud-test-*. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include "pf_test.h"

#include "pf_manager/pf_manager.h"

#define TMP_PATH	32	/* "/tmp/pf-config-XXXXXX" and its NUL */

/* Write @len bytes of @text to a new file; its path in @path (TMP_PATH bytes). */
static void file_new(char *path, const char *text, size_t len)
{
	int fd;

	snprintf(path, TMP_PATH, "/tmp/pf-config-XXXXXX");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, len), (ssize_t)len);
	close(fd);
}

/* pf_config_load() of the file @text (@len bytes): its result, its error after the file's
 * name and ": " in @msg, and that a refusal changed nothing. */
static int load_text(const char *text, size_t len, struct pf_config *cfg, char *msg,
		     size_t msglen)
{
	char path[TMP_PATH], err[600] = "";
	struct pf_config before;
	size_t n;
	int r;

	file_new(path, text, len);
	pf_config_defaults(cfg);
	before = *cfg;
	r = pf_config_load(cfg, path, err, sizeof(err));
	unlink(path);
	n = strlen(path);
	msg[0] = 0;
	if (r) {
		assert_memory_equal(cfg, &before, sizeof(*cfg));
		if (strncmp(err, path, n) || strncmp(err + n, ": ", 2))
			fail_msg("the error \"%s\" does not start with the file's name", err);
		snprintf(msg, msglen, "%s", err + n + 2);
	}
	return r;
}

/* ---- the file's lines ---- */
static const struct line_case {
	const char *name, *text;
	const char *msg;	/* the error after the file's name; NULL: loads */
} line_cases[] = {
	{ "indented line after a key", "[pf]\nid = mygpu\n   max_vfs = 4\n",
	  "line 3: indented line (continuation lines are not supported)" },
	{ "indented line after a header", "[pf]\n\tmax_vfs = 4\n",
	  "line 2: indented line (continuation lines are not supported)" },
	{ "indented section header", "[pf]\nmax_vfs = 4\n  [gpu]\nvram = 4G\n",
	  "line 3: indented line (continuation lines are not supported)" },
	{ "indented comment and blank lines load", "[pf]\nmax_vfs = 4\n   ; note\n \t\n"
	  "\t# note\nnum_vfs = 2\n", NULL },
	{ "CRLF lines load", "[pf]\r\nmax_vfs = 4\r\n\r\nnum_vfs = 2\r\n", NULL },
	{ "byte-order mark loads", "\xef\xbb\xbf[pf]\nmax_vfs = 4\n", NULL },
	{ "key twice", "[gpu]\nvram = 4G\nengines = 2\nvram = 8G\n",
	  "line 4: [gpu] vram: set twice (first at line 2)" },
	{ "key twice with the same value", "[pf]\nmax_vfs = 4\nmax_vfs = 4\n",
	  "line 3: [pf] max_vfs: set twice (first at line 2)" },
	{ "key twice in two [gpu] sections", "[gpu]\nvram = 4G\n[pf]\nmax_vfs = 2\n[gpu]\n"
	  "vram = 8G\n", "line 6: [gpu] vram: set twice (first at line 2)" },
	{ "quantum_us and quantum_ms", "[sched]\nquantum_us = 100\nquantum_ms = 2\n",
	  "line 3: [sched] quantum_ms: set twice (first at line 2, as quantum_us)" },
	{ "quantum_ms twice", "[sched]\nquantum_ms = 1\n; x\nquantum_ms = 2\n",
	  "line 4: [sched] quantum_ms: set twice (first at line 2)" },
	{ "one key in two sections is two keys", "[pf]\nid = a\n[gpu]\nmodel = a\n", NULL },
	{ "syntax error before an indented line", "[pf\n  max_vfs = 4\n", "line 1: syntax error" },
	{ "bad key before a syntax error", "[pf]\nmax_vfs = 64\n[gpu\n",
	  "line 2: [pf] max_vfs = 64: bad value (1 to 63)" },
};

/* Load @text: it loads if @want is NULL, else it is refused with an error that is @want
 * (or, with @prefix, starts with it). */
static void check_load(const char *name, const char *text, const char *want, bool prefix)
{
	struct pf_config cfg;
	char msg[600];
	int r = load_text(text, strlen(text), &cfg, msg, sizeof(msg));

	if (!want) {
		assert_int_equal(r, 0);
		return;
	}
	assert_int_equal(r, -EINVAL);
	if (prefix ? strncmp(msg, want, strlen(want)) : strcmp(msg, want))
		fail_msg("%s: the error is \"%s\", not \"%s\"", name, msg, want);
}

static void test_lines(void **state)
{
	const struct line_case *c = *state;

	check_load(c->name, c->text, c->msg, false);
}

/* A NUL byte inside a line (inih would read the line as ending there) is refused. */
static void test_nul_byte(void **state)
{
	static const char text[] = "[pf]\nmax_vfs = 4\0 junk\n";
	struct pf_config cfg;
	char msg[600];

	(void)state;
	assert_int_equal(load_text(text, sizeof(text) - 1, &cfg, msg, sizeof(msg)), -EINVAL);
	assert_string_equal(msg, "line 2: holds a NUL byte");
}

/* Line 2 of @n characters, a comment or a key's value, then a bad key on line 3: the line
 * is taken whole up to 199 characters (the bad key after it is what is refused), refused
 * beyond, and never read in two (which would count lines wrong or read the rest as a key). */
static void test_long_line(void **state)
{
	static const unsigned int lens[] = { 199, 200, 500 };
	char text[700], msg[600], line2[600];
	struct pf_config cfg;

	(void)state;
	for (unsigned int i = 0; i < 3; i++) {
		for (unsigned int comment = 0; comment < 2; comment++) {
			unsigned int n = lens[i];

			snprintf(line2, sizeof(line2), comment ? ";" : "state_dir = /");
			memset(line2 + strlen(line2), 'x', n - strlen(line2));
			line2[n] = 0;
			snprintf(text, sizeof(text), "[paths]\n%s\nruntime_dir = run\n", line2);
			assert_int_equal(load_text(text, strlen(text), &cfg, msg, sizeof(msg)),
					 -EINVAL);
			if (n <= 199)
				assert_non_null(strstr(msg, "line 3: [paths] runtime_dir = run: "));
			else
				assert_string_equal(msg, "line 2: line too long (at most 199 "
						    "characters)");
		}
	}
}

/* ---- values ---- */
static const struct value_case {
	const char *name, *text;
	const char *msg;	/* after the file's name; NULL: loads */
} value_cases[] = {
	{ "max_vfs 64", "[pf]\nmax_vfs = 64\n", "line 2: [pf] max_vfs = 64: bad value (1 to 63)" },
	{ "max_vfs 0", "[pf]\nmax_vfs = 0\n", "line 2: [pf] max_vfs = 0: bad value (1 to 63)" },
	{ "engines 5", "[gpu]\nengines = 5\n", "line 2: [gpu] engines = 5: bad value (1 to 4)" },
	{ "engines 0", "[gpu]\nengines = 0\n", "line 2: [gpu] engines = 0: bad value (1 to 4)" },
	{ "channels 0", "[gpu]\nchannels = 0\n",
	  "line 2: [gpu] channels = 0: bad value (1 to 1048576)" },
	{ "admin_slots 32", "[control]\nadmin_slots = 32\n",
	  "line 2: [control] admin_slots = 32: bad value (0 to 31)" },
	{ "reset_evict_ms 10001", "[pf]\nreset_evict_ms = 10001\n",
	  "line 2: [pf] reset_evict_ms = 10001: bad value (0 to 10000)" },
	{ "max_line 100", "[control]\nmax_line = 100\n",
	  "line 2: [control] max_line = 100: bad value (1024 to 16777216)" },
	{ "vram 3M", "[gpu]\nvram = 3M\n",
	  "line 2: [gpu] vram = 3M: bad value (a multiple of 2M, 2M to 1T)" },
	{ "vram 0", "[gpu]\nvram = 0\n",
	  "line 2: [gpu] vram = 0: bad value (a multiple of 2M, 2M to 1T)" },
	{ "dma_size 3M", "[pf]\ndma_size = 3M\n",
	  "line 2: [pf] dma_size = 3M: bad value (a multiple of 2M, 2M to 1G)" },
	{ "quantum_ms 10001", "[sched]\nquantum_ms = 10001\n",
	  "line 2: [sched] quantum_ms = 10001: bad value (0 to 10000)" },
	{ "relative runtime_dir", "[paths]\nruntime_dir = run\n",
	  "line 2: [paths] runtime_dir = run: bad value (an absolute path of at most 90 "
	  "characters)" },
	{ "relative state_dir", "[paths]\nstate_dir = ./state\n",
	  "line 2: [paths] state_dir = ./state: bad value (an absolute path of at most 511 "
	  "characters)" },
	{ "runtime_dir of 91 characters", "[paths]\nruntime_dir = /" "0123456789012345678901234"
	  "56789012345678901234567890123456789012345678901234567890123456789\n",
	  "line 2: [paths] runtime_dir = /" },
	{ "runtime_dir of 90 characters", "[paths]\nruntime_dir = /" "012345678901234567890123"
	  "45678901234567890123456789012345678901234567890123456789012345678\n", NULL },
	{ "model with a space", "[gpu]\nmodel = a b\n",
	  "line 2: [gpu] model = a b: bad value (1 to 20 characters of A-Z a-z 0-9 . _ -, a "
	  "letter or digit first)" },
	{ "model with a slash", "[gpu]\nmodel = a/b\n", "line 2: [gpu] model = a/b: bad value" },
	{ "model from a dash", "[gpu]\nmodel = -x\n", "line 2: [gpu] model = -x: bad value" },
	{ "model empty", "[gpu]\nmodel =\n", "line 2: [gpu] model = : bad value" },
	{ "model of 21 characters", "[gpu]\nmodel = abcdefghij0123456789k\n",
	  "line 2: [gpu] model = abcdefghij0123456789k: bad value" },
	{ "model of 20 characters", "[gpu]\nmodel = A.b_c-d0123456789xyz\n", NULL },
	{ "empty id", "[pf]\nid =\n",
	  "line 2: [pf] id = : bad value (1 to 39 characters, no control character)" },
	{ "id with a control character", "[pf]\nid = a\tb\n", "line 2: [pf] id = a\tb: bad value" },
};

static void test_values(void **state)
{
	const struct value_case *c = *state;

	check_load(c->name, c->text, c->msg, true);
}

/* Every count key's form "A to B" is its range: A and B are taken, A - 1 and B + 1 are
 * refused and change nothing. */
static void test_forms(void **state)
{
	static const char *const counts[][2] = {
		{ "gpu", "engines" }, { "gpu", "channels" }, { "gpu", "doorbells" },
		{ "pf", "max_vfs" }, { "pf", "num_vfs" }, { "pf", "spare_channels" },
		{ "pf", "spare_doorbells" }, { "pf", "reset_evict_ms" },
		{ "sched", "quantum_us" }, { "sched", "quantum_ms" },
		{ "control", "max_line" }, { "control", "admin_slots" },
		{ "control", "per_uid" }, { "control", "negotiate_timeout_ms" },
	};
	struct pf_config cfg, before;
	unsigned long lo, hi;
	char v[32];

	(void)state;
	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
		const char *form = pf_config_expect(counts[i][0], counts[i][1]);

		assert_non_null(form);
		if (sscanf(form, "%lu to %lu", &lo, &hi) != 2)
			fail_msg("[%s] %s: form \"%s\"", counts[i][0], counts[i][1], form);
		pf_config_defaults(&cfg);
		snprintf(v, sizeof(v), "%lu", lo);
		assert_int_equal(pf_config_set(&cfg, counts[i][0], counts[i][1], v), 0);
		snprintf(v, sizeof(v), "%lu", hi);
		assert_int_equal(pf_config_set(&cfg, counts[i][0], counts[i][1], v), 0);
		before = cfg;
		snprintf(v, sizeof(v), "%lu", hi + 1);
		assert_int_not_equal(pf_config_set(&cfg, counts[i][0], counts[i][1], v), 0);
		if (lo) {
			snprintf(v, sizeof(v), "%lu", lo - 1);
			assert_int_not_equal(pf_config_set(&cfg, counts[i][0], counts[i][1], v),
					     0);
		}
		assert_memory_equal(&cfg, &before, sizeof(cfg));
	}
	assert_null(pf_config_expect("gpu", "colour"));
}

/* ---- what is not a readable regular file ---- */
static void expect_load(const char *path, int want, const char *msg)
{
	struct pf_config cfg, before;
	char err[600] = "";

	pf_config_defaults(&cfg);
	before = cfg;
	assert_int_equal(pf_config_load(&cfg, path, err, sizeof(err)), want);
	assert_string_equal(err, msg);
	assert_memory_equal(&cfg, &before, sizeof(cfg));
}

static void test_not_a_file(void **state)
{
	char dir[] = "/tmp/pf-config-XXXXXX", fifo[64], want[128];

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(want, sizeof(want), "%s: not a regular file", dir);
	expect_load(dir, -EINVAL, want);
	/* A FIFO with no writer: refused, not waited on. */
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	snprintf(want, sizeof(want), "%s: not a regular file", fifo);
	expect_load(fifo, -EINVAL, want);
	expect_load("/dev/null", -EINVAL, "/dev/null: not a regular file");
	unlink(fifo);
	snprintf(want, sizeof(want), "cannot open %s: No such file or directory", fifo);
	expect_load(fifo, -ENOENT, want);
	expect_load("/etc/passwd/x", -ENOTDIR, "cannot open /etc/passwd/x: Not a directory");
	rmdir(dir);
}

/* A regular file whose read fails: /proc/self/mem at offset 0, which no mapping holds. */
static void test_read_error(void **state)
{
	(void)state;
	expect_load("/proc/self/mem", -EINVAL, "/proc/self/mem: read error: Input/output error");
}

/* A file its reader may not open: named with the cause, not as a missing one. Root drops
 * to nobody in a child for it. */
static void test_no_permission(void **state)
{
	char path[TMP_PATH], want[128];
	bool root = geteuid() == 0;
	int st;
	pid_t pid;

	(void)state;
	file_new(path, "[pf]\nmax_vfs = 4\n", 17);
	assert_int_equal(chmod(path, 0600), 0);
	snprintf(want, sizeof(want), "cannot open %s: Permission denied", path);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		struct pf_config cfg;
		char err[600] = "";

		if (root && (setgroups(0, NULL) || setresgid(65534, 65534, 65534) ||
			     setresuid(65534, 65534, 65534)))
			_exit(3);
		if (!root && chmod(path, 0))
			_exit(4);
		pf_config_defaults(&cfg);
		if (pf_config_load(&cfg, path, err, sizeof(err)) != -EACCES)
			_exit(1);
		_exit(strcmp(err, want) ? 2 : 0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	unlink(path);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* ---- the whole configuration ---- */
struct flag {
	const char *section, *key, *value;
};

static const struct check_case {
	const char *name, *text;
	struct flag flag;	/* set after the file, as a flag is; NULL section: none */
	const char *msg;	/* pf_config_check()'s error, "FILE" for the file's name */
} check_cases[] = {
	{ "num_vfs above max_vfs", "[pf]\nmax_vfs = 4\nnum_vfs = 5\n", { NULL, NULL, NULL },
	  "FILE: line 3: [pf] num_vfs: 5 must be at most [pf] max_vfs (4)" },
	{ "max_vfs below a flag's num_vfs", "[pf]\n\nmax_vfs = 4\n", { "pf", "num_vfs", "5" },
	  "FILE: line 3: [pf] max_vfs: 4 must be at least [pf] num_vfs (5)" },
	{ "a flag overrides the file's line", "[pf]\nmax_vfs = 4\nnum_vfs = 5\n",
	  { "pf", "num_vfs", "6" },
	  "FILE: line 2: [pf] max_vfs: 4 must be at least [pf] num_vfs (6)" },
	{ "flags alone name no file", "", { "pf", "spare_vram", "16G" },
	  "[pf] spare_vram: 16 GiB must be below [gpu] vram (16 GiB)" },
	{ "vram not above the default spare", "[gpu]\nvram = 512M\n", { NULL, NULL, NULL },
	  "FILE: line 2: [gpu] vram: 512 MiB must be above [pf] spare_vram (512 MiB)" },
	{ "spare_vram not below vram", "[gpu]\nvram = 1G\n[pf]\nspare_vram = 1G\n",
	  { NULL, NULL, NULL },
	  "FILE: line 4: [pf] spare_vram: 1 GiB must be below [gpu] vram (1 GiB)" },
	{ "spare_channels takes every channel", "[gpu]\nchannels = 64\n", { NULL, NULL, NULL },
	  "FILE: line 2: [gpu] channels: 64 must be above [pf] spare_channels (64)" },
	{ "spare_doorbells takes every doorbell", "[pf]\nspare_doorbells = 4096\n",
	  { NULL, NULL, NULL },
	  "FILE: line 2: [pf] spare_doorbells: 4096 must be below [gpu] doorbells (4096)" },
	{ "no such admin group", "[gpu]\nvram = 4G\n[control]\nadmin_group = nosuchgroup-xyz\n",
	  { NULL, NULL, NULL },
	  "FILE: line 4: [control] admin_group: group nosuchgroup-xyz does not exist" },
	{ "a good file", "[gpu]\nvram = 4G\n[pf]\nmax_vfs = 4\nnum_vfs = 4\n",
	  { NULL, NULL, NULL }, NULL },
};

static void test_check(void **state)
{
	const struct check_case *c = *state;
	char path[TMP_PATH], err[600] = "", want[600];
	struct pf_config cfg;
	const char *m;

	file_new(path, c->text, strlen(c->text));
	pf_config_defaults(&cfg);
	assert_int_equal(pf_config_load(&cfg, path, err, sizeof(err)), 0);
	unlink(path);
	if (c->flag.section)
		assert_int_equal(pf_config_set(&cfg, c->flag.section, c->flag.key, c->flag.value),
				 0);
	if (!c->msg) {
		assert_int_equal(pf_config_check(&cfg, err, sizeof(err)), 0);
		return;
	}
	assert_int_equal(pf_config_check(&cfg, err, sizeof(err)), -EINVAL);
	m = strncmp(c->msg, "FILE", 4) ? c->msg : c->msg + 4;
	snprintf(want, sizeof(want), "%s%s", m == c->msg ? "" : path, m);
	if (strcmp(err, want))
		fail_msg("%s: the error is \"%s\", not \"%s\"", c->name, err, want);
}

/* A configuration filled by other means than pf_config_set() is judged by the same rules. */
static void test_check_struct(void **state)
{
	struct pf_config cfg;
	char err[256];

	(void)state;
	pf_config_defaults(&cfg);
	assert_int_equal(pf_config_check(&cfg, err, sizeof(err)), 0);
	cfg.engines = 9;
	assert_int_equal(pf_config_check(&cfg, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "[gpu] engines: bad value (1 to 4)");
	pf_config_defaults(&cfg);
	snprintf(cfg.runtime_dir, sizeof(cfg.runtime_dir), "run");
	assert_int_equal(pf_config_check(&cfg, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "[paths] runtime_dir: bad value (an absolute path of at most 90 "
			    "characters)");
	pf_config_defaults(&cfg);
	cfg.sched_policy = 7;
	assert_int_equal(pf_config_check(&cfg, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "[sched] policy: bad value (best-effort, equal-share or "
			    "fixed-share)");
}

/* ---- the real vgpud ---- */
static const struct daemon_case {
	const char *name, *text;	/* text NULL: --config names a directory */
	const char *msg;		/* in its stderr */
} daemon_cases[] = {
	{ "vgpud: a directory", NULL, "not a regular file" },
	{ "vgpud: indented line", "[pf]\nid = mygpu\n   max_vfs = 4\n",
	  "line 3: indented line (continuation lines are not supported)" },
	{ "vgpud: key twice", "[gpu]\nvram = 4G\n[gpu]\nvram = 8G\n",
	  "line 4: [gpu] vram: set twice (first at line 2)" },
	{ "vgpud: num_vfs above max_vfs", "[pf]\nmax_vfs = 2\nnum_vfs = 3\n",
	  "line 3: [pf] num_vfs: 3 must be at most [pf] max_vfs (2)" },
	{ "vgpud: no such admin group", "[control]\nadmin_group = nosuchgroup-xyz\n",
	  "line 2: [control] admin_group: group nosuchgroup-xyz does not exist" },
	{ "vgpud: relative state_dir", "[paths]\nstate_dir = state\n",
	  "line 2: [paths] state_dir = state: bad value (an absolute path" },
};

/* vgpud with the file exits 2 naming it, and makes neither its state nor runtime dir. */
static void test_daemon(void **state)
{
	const struct daemon_case *c = *state;
	struct tdaemon *d = t_daemon_new();
	char path[200], log[200], want[400];
	char *args[] = { "--config", path, NULL };
	FILE *f;

	snprintf(path, sizeof(path), "%s/vgpud.conf", d->root);
	if (c->text) {
		f = fopen(path, "w");
		assert_non_null(f);
		fputs(c->text, f);
		fclose(f);
	} else {
		assert_int_equal(mkdir(path, 0700), 0);
	}
	assert_int_equal(t_daemon_start_logged(d, args, log, sizeof(log)), 1000 + 2);
	snprintf(want, sizeof(want), "vgpud: configuration: %s: %s", path, c->msg);
	if (!t_log_has(log, want))
		fail_msg("%s: \"%s\" is not in vgpud's stderr", c->name, want);
	assert_int_equal(access(d->state, F_OK), -1);
	assert_int_equal(access(d->run, F_OK), -1);
	if (!c->text)
		rmdir(path);
	t_daemon_free(d);
}

#define CASE(fn, arr, i) { arr[i].name, fn, NULL, NULL, (void *)&arr[i] }
#define NR(arr) (sizeof(arr) / sizeof(arr[0]))

int main(void)
{
	struct CMUnitTest t[96];
	size_t n = 0;

	for (size_t i = 0; i < NR(line_cases); i++)
		t[n++] = (struct CMUnitTest)CASE(test_lines, line_cases, i);
	for (size_t i = 0; i < NR(value_cases); i++)
		t[n++] = (struct CMUnitTest)CASE(test_values, value_cases, i);
	for (size_t i = 0; i < NR(check_cases); i++)
		t[n++] = (struct CMUnitTest)CASE(test_check, check_cases, i);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_nul_byte);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_long_line);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_forms);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_not_a_file);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_read_error);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_no_permission);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_check_struct);
	for (size_t i = 0; i < NR(daemon_cases); i++)
		t[n++] = (struct CMUnitTest){ daemon_cases[i].name, test_daemon, NULL, t_teardown,
					      (void *)&daemon_cases[i] };
	return _cmocka_run_group_tests("pf_config", t, n, NULL, NULL);
}

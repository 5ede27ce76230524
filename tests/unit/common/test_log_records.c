// SPDX-License-Identifier: MIT
/* Log records: stderr lines carry a UTC wall-clock ISO 8601 stamp with milliseconds and
 * stay one line when the message has newlines; a record sink gets the VF and slice UUID
 * as fields, given explicitly or from the thread's scope, never parsed from the text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/log.h"

static void test_stamp(void **state)
{
	char buf[40];

	(void)state;
	cmn_log_stamp(0, buf, sizeof(buf));
	assert_string_equal(buf, "1970-01-01T00:00:00.000Z");
	cmn_log_stamp(1234567890123456789ull, buf, sizeof(buf));
	assert_string_equal(buf, "2009-02-13T23:31:30.123Z");
}

/* One record on stderr, read back from a file standing in for it. */
static void test_stderr_line(void **state)
{
	char path[] = "/tmp/vgpu-log-XXXXXX", line[2048], rest[2048];
	int fd = mkstemp(path), saved = dup(2), lines = 0;
	time_t t0, t1, stamp;
	struct tm tm = { 0 };
	unsigned int ms;
	FILE *f;

	(void)state;
	assert_true(fd >= 0);
	fflush(stderr);
	dup2(fd, 2);
	t0 = time(NULL);
	cmn_err("two\nlines \\ and %d", 7);
	t1 = time(NULL);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	f = fdopen(fd, "r");
	rewind(f);
	assert_non_null(fgets(line, sizeof(line), f));
	lines = 1;
	while (fgets(rest, sizeof(rest), f))
		lines++;
	fclose(f);
	unlink(path);
	assert_int_equal(lines, 1);			/* the newline did not split it */
	assert_non_null(strptime(line, "%Y-%m-%dT%H:%M:%S", &tm));
	assert_int_equal(sscanf(line + 19, ".%3uZ", &ms), 1);
	assert_int_equal(line[23], 'Z');
	stamp = timegm(&tm);
	assert_true(stamp >= t0 && stamp <= t1);	/* wall clock, UTC */
	assert_string_equal(line + 24, " error: two\\nlines \\\\ and 7\n");
}

struct seen {
	int count;
	unsigned int vf;
	char uuid[40];
	char msg[256];
};

static void rec_sink(const struct cmn_log_rec *r, void *ctx)
{
	struct seen *s = ctx;

	s->count++;
	s->vf = r->vf;
	snprintf(s->uuid, sizeof(s->uuid), "%s", r->uuid ? r->uuid : "");
	snprintf(s->msg, sizeof(s->msg), "%s", r->msg);
}

static void test_fields(void **state)
{
	struct seen s = { 0 };

	(void)state;
	cmn_log_set_rec_sink(rec_sink, &s);
	cmn_log_set_level(VGPU_LOG_INFO);
	/* The text names another VF: the fields are what the caller gave. */
	cmn_log_vf(VGPU_LOG_INFO, 3, "11111111-1111-4111-8111-111111111111",
		   "VF 9 slice x: line one\nline two");
	assert_int_equal(s.count, 1);
	assert_int_equal(s.vf, 3);
	assert_string_equal(s.uuid, "11111111-1111-4111-8111-111111111111");
	assert_string_equal(s.msg, "VF 9 slice x: line one\nline two");	/* whole, for the sink */
	cmn_log_scope_set(5, "55555555-5555-4555-8555-555555555555");
	cmn_warn("inside the scope");
	assert_int_equal(s.vf, 5);
	assert_string_equal(s.uuid, "55555555-5555-4555-8555-555555555555");
	cmn_log_vf(VGPU_LOG_WARN, 2, NULL, "explicit wins");
	assert_int_equal(s.vf, 2);
	assert_string_equal(s.uuid, "");
	cmn_log_scope_clear();
	cmn_warn("VF 4 slice 44444444-4444-4444-8444-444444444444 in text only");
	assert_int_equal(s.vf, 0);
	assert_string_equal(s.uuid, "");
	cmn_dbg("below the threshold");
	assert_int_equal(s.count, 4);
	cmn_log_set_rec_sink(NULL, NULL);
	cmn_log_set_level(VGPU_LOG_WARN);
}

int main(void)
{
	static const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stamp),
		cmocka_unit_test(test_stderr_line),
		cmocka_unit_test(test_fields),
	};

	return cmocka_run_group_tests_name("log_records", tests, NULL, NULL);
}

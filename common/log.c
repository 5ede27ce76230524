// SPDX-License-Identifier: MIT
/* Leveled logging; see log.h. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"

static const char *const log_names[] = { "error", "warn", "info", "debug" };

/* -1 until first use, so $VGPU_LOG is read lazily without a constructor. */
static _Atomic int log_level = -1;
static pthread_mutex_t log_sink_lock = PTHREAD_MUTEX_INITIALIZER;
static cmn_log_sink_fn log_sink;	/* protected by log_sink_lock */
static void *log_sink_ctx;
static cmn_log_rec_sink_fn log_rec_sink;	/* protected by log_sink_lock; wins over log_sink */
static void *log_rec_sink_ctx;
/* The calling thread's fields (cmn_log_scope_set). */
static _Thread_local unsigned int log_scope_vf;
static _Thread_local char log_scope_uuid[40];

int cmn_log_parse_level(const char *s, enum cmn_log_level *out)
{
	if (!s)
		return -EINVAL;
	for (int i = 0; i <= VGPU_LOG_DEBUG; i++) {
		if (!strcmp(s, log_names[i]) || (s[0] == '0' + i && !s[1])) {
			*out = i;
			return 0;
		}
	}
	return -EINVAL;
}

enum cmn_log_level cmn_log_get_level(void)
{
	int l = atomic_load_explicit(&log_level, memory_order_relaxed);
	enum cmn_log_level parsed = VGPU_LOG_WARN;

	if (l >= 0)
		return l;
	cmn_log_parse_level(getenv("VGPU_LOG"), &parsed);
	atomic_store_explicit(&log_level, parsed, memory_order_relaxed);
	return parsed;
}

void cmn_log_set_level(enum cmn_log_level level)
{
	atomic_store_explicit(&log_level, level, memory_order_relaxed);
}

void cmn_log_set_sink(cmn_log_sink_fn fn, void *ctx)
{
	pthread_mutex_lock(&log_sink_lock);
	log_sink = fn;
	log_sink_ctx = ctx;
	pthread_mutex_unlock(&log_sink_lock);
}

void cmn_log_set_rec_sink(cmn_log_rec_sink_fn fn, void *ctx)
{
	pthread_mutex_lock(&log_sink_lock);
	log_rec_sink = fn;
	log_rec_sink_ctx = ctx;
	pthread_mutex_unlock(&log_sink_lock);
}

void cmn_log_scope_set(unsigned int vf, const char *uuid)
{
	log_scope_vf = vf;
	snprintf(log_scope_uuid, sizeof(log_scope_uuid), "%s", uuid ? uuid : "");
}

void cmn_log_scope_clear(void)
{
	log_scope_vf = 0;
	log_scope_uuid[0] = 0;
}

void cmn_log_stamp(uint64_t wall_ns, char *buf, size_t len)
{
	time_t sec = (time_t)(wall_ns / 1000000000ull);
	struct tm tm;
	char day[24];

	gmtime_r(&sec, &tm);
	strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, len, "%s.%03uZ", day, (unsigned int)(wall_ns / 1000000ull % 1000));
}

/* One line on stderr: a message's newlines would split the record, so they are escaped. */
static void log_stderr(const struct cmn_log_rec *r)
{
	struct timespec ts;
	char stamp[40];

	clock_gettime(CLOCK_REALTIME, &ts);
	cmn_log_stamp((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec, stamp,
		      sizeof(stamp));
	flockfile(stderr);
	fprintf(stderr, "%s %s: ", stamp, log_names[r->level]);
	for (const char *p = r->msg; *p; p++) {
		if (*p == '\n')
			fputs("\\n", stderr);
		else if (*p == '\\')
			fputs("\\\\", stderr);
		else
			putc_unlocked(*p, stderr);
	}
	putc_unlocked('\n', stderr);
	funlockfile(stderr);
}

static void log_emit(struct cmn_log_rec *r)
{
	if (!r->vf && !r->uuid) {
		r->vf = log_scope_vf;
		r->uuid = log_scope_uuid[0] ? log_scope_uuid : NULL;
	}
	pthread_mutex_lock(&log_sink_lock);
	if (log_rec_sink)
		log_rec_sink(r, log_rec_sink_ctx);
	else if (log_sink)
		log_sink(r->level, r->msg, log_sink_ctx);
	else
		log_stderr(r);
	pthread_mutex_unlock(&log_sink_lock);
}

void cmn_log(enum cmn_log_level level, const char *fmt, ...)
{
	char msg[1024];
	struct cmn_log_rec r = { .level = level, .msg = msg };
	va_list ap;

	if ((int)level > (int)cmn_log_get_level())
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_emit(&r);
}

void cmn_log_vf(enum cmn_log_level level, unsigned int vf, const char *uuid, const char *fmt, ...)
{
	char msg[1024];
	struct cmn_log_rec r = { .level = level, .msg = msg, .vf = vf, .uuid = uuid };
	va_list ap;

	if ((int)level > (int)cmn_log_get_level())
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_emit(&r);
}

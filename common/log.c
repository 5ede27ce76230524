/* Leveled logging; see log.h. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"

static const char *const log_names[] = { "error", "warn", "info", "debug" };

/* -1 until first use, so $VGPU_LOG is read lazily without a constructor. */
static _Atomic int log_level = -1;
static pthread_mutex_t log_sink_lock = PTHREAD_MUTEX_INITIALIZER;
static cmn_log_sink_fn log_sink;	/* protected by log_sink_lock */
static void *log_sink_ctx;

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

void cmn_log(enum cmn_log_level level, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	if ((int)level > (int)cmn_log_get_level())
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);

	pthread_mutex_lock(&log_sink_lock);
	if (log_sink) {
		log_sink(level, msg, log_sink_ctx);
	} else {
		uint64_t ns = cmn_now_ns();

		fprintf(stderr, "[%6llu.%06llu] %s: %s\n",
			(unsigned long long)(ns / 1000000000ull),
			(unsigned long long)(ns / 1000 % 1000000), log_names[level], msg);
	}
	pthread_mutex_unlock(&log_sink_lock);
}

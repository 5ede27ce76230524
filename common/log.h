/* SPDX-License-Identifier: MIT */
/* common/log.h - leveled logging to stderr (or a sink the daemon installs).
 *
 * The threshold starts from $VGPU_LOG (error|warn|info|debug or 0..3) and defaults to warn,
 * so tests and tools stay quiet unless asked. Safe to call from any thread.
 * On stderr each record is one line: a UTC wall-clock stamp with milliseconds (ISO 8601,
 * "2026-01-02T03:04:05.678Z"), the level, the message with newlines written as "\n".
 * A record can carry structured fields (the VF, the slice UUID): given with cmn_log_vf, or
 * from the calling thread's scope (cmn_log_scope_set), so that a record sink (the journal)
 * gets them as fields instead of picking them out of the text. */
#ifndef VGPU_COMMON_LOG_H
#define VGPU_COMMON_LOG_H

#include <stddef.h>
#include <stdint.h>

enum cmn_log_level {
	VGPU_LOG_ERR,
	VGPU_LOG_WARN,
	VGPU_LOG_INFO,
	VGPU_LOG_DEBUG,
};

/* A sink receives each formatted message (no trailing newline). */
typedef void (*cmn_log_sink_fn)(enum cmn_log_level level, const char *msg, void *ctx);

/* One record with its structured fields: vf 0 and uuid NULL when it has none. */
struct cmn_log_rec {
	enum cmn_log_level level;
	const char *msg;		/* as formatted, newlines included */
	unsigned int vf;
	const char *uuid;
};

/* A record sink receives each record with its fields. */
typedef void (*cmn_log_rec_sink_fn)(const struct cmn_log_rec *rec, void *ctx);

/* Set the threshold; messages above it are dropped before formatting. */
void cmn_log_set_level(enum cmn_log_level level);
/* Current threshold. */
enum cmn_log_level cmn_log_get_level(void);
/* Parse "error"/"warn"/"info"/"debug" or a digit; -EINVAL if it is neither. */
int cmn_log_parse_level(const char *s, enum cmn_log_level *out);
/* Route messages to @fn (NULL restores stderr). */
void cmn_log_set_sink(cmn_log_sink_fn fn, void *ctx);
/* Route records with their fields to @fn (NULL: back to the message sink or stderr). */
void cmn_log_set_rec_sink(cmn_log_rec_sink_fn fn, void *ctx);
/* Log one message at @level. */
void cmn_log(enum cmn_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Log one message about VF @vf (0: none) and slice @uuid (NULL: none). */
void cmn_log_vf(enum cmn_log_level level, unsigned int vf, const char *uuid, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Fields for every record this thread logs until cmn_log_scope_clear (@uuid is copied). */
void cmn_log_scope_set(unsigned int vf, const char *uuid);
/* End this thread's scope. */
void cmn_log_scope_clear(void);
/* Format @wall_ns (CLOCK_REALTIME) as UTC ISO 8601 with milliseconds into @buf (>= 25). */
void cmn_log_stamp(uint64_t wall_ns, char *buf, size_t len);

#define cmn_err(...)	cmn_log(VGPU_LOG_ERR, __VA_ARGS__)
#define cmn_warn(...)	cmn_log(VGPU_LOG_WARN, __VA_ARGS__)
#define cmn_info(...)	cmn_log(VGPU_LOG_INFO, __VA_ARGS__)
#define cmn_dbg(...)	cmn_log(VGPU_LOG_DEBUG, __VA_ARGS__)

#endif

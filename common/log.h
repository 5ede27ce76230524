/* common/log.h - leveled logging to stderr (or a sink the daemon installs).
 *
 * The threshold starts from $VGPU_LOG (error|warn|info|debug or 0..3) and defaults to warn,
 * so tests and tools stay quiet unless asked. Safe to call from any thread. */
#ifndef VGPU_COMMON_LOG_H
#define VGPU_COMMON_LOG_H

enum cmn_log_level {
	VGPU_LOG_ERR,
	VGPU_LOG_WARN,
	VGPU_LOG_INFO,
	VGPU_LOG_DEBUG,
};

/* A sink receives each formatted message (no trailing newline). */
typedef void (*cmn_log_sink_fn)(enum cmn_log_level level, const char *msg, void *ctx);

/* Set the threshold; messages above it are dropped before formatting. */
void cmn_log_set_level(enum cmn_log_level level);
/* Current threshold. */
enum cmn_log_level cmn_log_get_level(void);
/* Parse "error"/"warn"/"info"/"debug" or a digit; -EINVAL if it is neither. */
int cmn_log_parse_level(const char *s, enum cmn_log_level *out);
/* Route messages to @fn (NULL restores stderr). */
void cmn_log_set_sink(cmn_log_sink_fn fn, void *ctx);
/* Log one message at @level. */
void cmn_log(enum cmn_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define cmn_err(...)	cmn_log(VGPU_LOG_ERR, __VA_ARGS__)
#define cmn_warn(...)	cmn_log(VGPU_LOG_WARN, __VA_ARGS__)
#define cmn_info(...)	cmn_log(VGPU_LOG_INFO, __VA_ARGS__)
#define cmn_dbg(...)	cmn_log(VGPU_LOG_DEBUG, __VA_ARGS__)

#endif

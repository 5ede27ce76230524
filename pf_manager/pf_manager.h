/* SPDX-License-Identifier: MIT */
/* pf_manager - vgpud's core: the PF manager of one emulated GPU. It owns the device
 * (gpu_model), the device-wide VRAM allocator (pma) and one child allocator per running
 * slice, enables VFs with sriov_numvfs semantics, defines/starts/stops slices (VF
 * partitions with quotas), serves the QMP-shaped control socket and one ivshmem-server
 * endpoint per VF, and keeps the state in files so a restarted daemon (even after kill -9)
 * brings every slice back at the same VRAM offsets with its contents.
 *
 * Single-threaded: every pf_* call below runs on the daemon's thread (the device model has
 * its own engine threads behind gpu_model's API). Calls return 0 or a negative errno. */
#ifndef VGPU_PF_MANAGER_H
#define VGPU_PF_MANAGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PF_NAME_MAX		40
#define PF_PATH_MAX		512
#define PF_UUID_STR		37	/* 36 characters and the NUL */
#define PF_MAX_VFS		63
#define PF_SCHED_QUANTUM_US_MAX	10000000u	/* the device slice: at most 10 s */
#define PF_MODEL_MAX		20	/* a model name's characters: type names carry it whole */
#define PF_RUNTIME_DIR_MAX	90	/* "<dir>/vf63.master.sock" fits a socket address */
#define PF_CONFIG_KEYS		32	/* settings whose line a configuration records */

/* Scheduling priority of a slice (xe's sched_priority; high is for the PF only). */
enum pf_priority {
	PF_PRIO_LOW,
	PF_PRIO_NORMAL,
	PF_PRIO_HIGH,
};

/* Daemon configuration: from defaults, then the INI file, then command-line flags. */
struct pf_config {
	char model[PF_NAME_MAX];	/* GPU model name, used in type names */
	char pf_id[PF_NAME_MAX];	/* the parent name vgpuctl -p matches */
	uint64_t vram_size;		/* bytes, 2 MiB multiple */
	unsigned int max_vfs;		/* 1..63 */
	unsigned int num_vfs;		/* VFs enabled at first start (state wins later) */
	uint64_t spare_vram;		/* PF spare: VRAM kept from every VF */
	unsigned int channels;		/* device-wide channel budget */
	unsigned int doorbells;		/* device-wide doorbell budget */
	unsigned int spare_channels, spare_doorbells;
	int sched_policy;		/* enum gpu_sched_policy */
	unsigned int sched_quantum_us;	/* device slice for equal/fixed share, 0 (default)
					 * ..PF_SCHED_QUANTUM_US_MAX */
	uint64_t dma_size;		/* DMA memory in each VF's BAR2 */
	unsigned int engines;		/* device engine threads */
	char runtime_dir[PF_PATH_MAX];
	char state_dir[PF_PATH_MAX];
	char admin_group[PF_NAME_MAX];	/* may run mutating commands besides root ("" = root) */
	unsigned int socket_mode;	/* control socket mode, default 0660 */
	unsigned int max_line;		/* largest control request in bytes */
	unsigned int admin_slots;	/* control connections only root / the admin group get */
	unsigned int per_uid;		/* control connections of one non-root uid */
	unsigned int negotiate_ms;	/* a connection that has not negotiated by then is closed */
	unsigned int reset_evict_ms;	/* a guest's time to evict before an announced reset
					 * (0: never announce), at most PF_RESET_EVICT_MS_MAX */
	bool vram_prealloc;		/* allocate each slice's BAR object in /dev/shm up
					 * front instead of overcommitting it (default off) */
	/* Where pf_config_load() found each setting, so that pf_config_check() names it: the
	 * file, and per setting its line there (0: a default or a flag). */
	char file[PF_PATH_MAX];
	unsigned int line[PF_CONFIG_KEYS];
};

#define PF_RESET_EVICT_MS_DEFAULT	2000u
#define PF_RESET_EVICT_MS_MAX		10000u	/* well inside a control client's patience */

/* Fill @cfg with the built-in defaults. */
void pf_config_defaults(struct pf_config *cfg);
/* Apply the INI file @path ([gpu], [pf], [sched], [paths], [control] sections). 0, or with
 * @err (size @errlen) naming the file, and the line and key where one is at fault: -errno
 * of an open that failed, else -EINVAL. @cfg is unchanged on error. */
int pf_config_load(struct pf_config *cfg, const char *path, char *err, size_t errlen);
/* Apply one key of section @section; the INI loader and the flags use it. 0, -ENOENT for
 * an unknown key, else -EINVAL or -ERANGE and @cfg unchanged. */
int pf_config_set(struct pf_config *cfg, const char *section, const char *key,
		  const char *value);
/* The form @section's @key takes (its range, its spellings), for an error message; NULL
 * for an unknown key. */
const char *pf_config_expect(const char *section, const char *key);
/* Check the whole configuration; -EINVAL with a message in @err that names the setting at
 * fault, with its file and line when pf_config_load() read it. */
int pf_config_check(const struct pf_config *cfg, char *err, size_t errlen);

/* Parse "low" / "normal" / "high". */
int pf_priority_parse(const char *s, enum pf_priority *out);
/* Name of @p. */
const char *pf_priority_name(enum pf_priority p);

/* xe-style fair share: the VRAM each of @nr_vfs VFs gets from @usable bytes (power of two,
 * at least 2 MiB), or 0 if even 2 MiB each does not fit. */
uint64_t pf_fair_vram(uint64_t usable, unsigned int nr_vfs);

struct pf_daemon;

/* Create the daemon from @cfg: device, allocator, state (restored from the state dir),
 * control socket and endpoints. A state file refused for what it holds (corrupt, foreign,
 * of a newer vgpud) fails with -EBADMSG, and only that does, with a logged message naming
 * it; nothing is applied. */
int pf_daemon_create(const struct pf_config *cfg, struct pf_daemon **out);
/* Serve until pf_daemon_stop() or SIGTERM/SIGINT; @ready_fn (may be NULL) is called once
 * the sockets are listening. 0 or -errno. */
int pf_daemon_run(struct pf_daemon *d, void (*ready_fn)(void));
/* Ask the loop to return (async-signal-safe). */
void pf_daemon_stop(struct pf_daemon *d);
/* Close everything; running slices keep their VRAM objects and journal entries so the next
 * daemon brings them back. NULL is a no-op. */
void pf_daemon_destroy(struct pf_daemon *d);

#endif

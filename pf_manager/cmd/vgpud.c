// SPDX-License-Identifier: MIT
/* vgpud - the PF manager daemon of one emulated GPU. See doc/vgpud.8. */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/capability.h>

#include "common/err.h"
#include "common/log.h"
#include "pf_manager/pf_manager.h"

/* The release (the Makefile passes debian/changelog's version). */
#include "common/version.h"

/* The exit status of a state file refused for what it holds. Like 2 (a bad option or
 * configuration) it does not get better by a restart: the units list both in
 * RestartPreventExitStatus=, while 1 (cannot start otherwise) is restarted. */
#define VGPUD_EXIT_STATE	3

static void usage(FILE *f)
{
	fprintf(f,
		"usage: vgpud [options]\n"
		"  -c, --config FILE        INI configuration (flags override it)\n"
		"      --runtime-dir DIR    sockets (default /run/vgpud)\n"
		"      --state-dir DIR      slice definitions and journal (default /var/lib/vgpud)\n"
		"      --vram SIZE          device VRAM, e.g. 16G (default 16G)\n"
		"      --max-vfs N          VFs the device supports, 1..63 (default 63)\n"
		"      --num-vfs N          VFs enabled on first start (default 0)\n"
		"      --spare-vram SIZE    VRAM kept for the PF (default 512M)\n"
		"      --model NAME         GPU model name used in type names (default vgpu)\n"
		"      --sched-policy P     best-effort | equal-share | fixed-share\n"
		"      --sched-quantum-us US  equal/fixed-share slice, 0..10000000 (0: 2000)\n"
		"      --sched-quantum-ms MS  the same in milliseconds\n"
		"      --admin-group GROUP  group allowed to change state besides root\n"
		"      --socket-mode MODE   control socket mode, octal (default 0660)\n"
		"      --admin-slots N      control connections kept for root and the admin group (8)\n"
		"      --per-uid N          control connections of one non-root user (default 4)\n"
		"      --negotiate-timeout-ms MS  close a connection not negotiated by then (5000)\n"
		"      --reset-evict-ms MS  a guest's time to evict before a reset, 0..10000 (2000)\n"
		"      --vram-prealloc BOOL reserve each slice's VRAM in /dev/shm (false)\n"
		"      --log-level LEVEL    error | warn | info | debug (default info)\n"
		"  -h, --help               this text\n"
		"  -V, --version            print the version\n");
}

enum { O_RUNTIME = 256, O_STATE, O_VRAM, O_MAXVFS, O_NUMVFS, O_SPARE, O_MODEL, O_POLICY,
       O_GROUP, O_MODE, O_LOGLEVEL, O_ADMIN_SLOTS, O_PER_UID, O_NEGOTIATE, O_QUANTUM_US,
       O_QUANTUM_MS, O_EVICT, O_PREALLOC };

static const struct option opts[] = {
	{ "config", required_argument, NULL, 'c' },
	{ "runtime-dir", required_argument, NULL, O_RUNTIME },
	{ "state-dir", required_argument, NULL, O_STATE },
	{ "vram", required_argument, NULL, O_VRAM },
	{ "max-vfs", required_argument, NULL, O_MAXVFS },
	{ "num-vfs", required_argument, NULL, O_NUMVFS },
	{ "spare-vram", required_argument, NULL, O_SPARE },
	{ "model", required_argument, NULL, O_MODEL },
	{ "sched-policy", required_argument, NULL, O_POLICY },
	{ "sched-quantum-us", required_argument, NULL, O_QUANTUM_US },
	{ "sched-quantum-ms", required_argument, NULL, O_QUANTUM_MS },
	{ "admin-group", required_argument, NULL, O_GROUP },
	{ "socket-mode", required_argument, NULL, O_MODE },
	{ "log-level", required_argument, NULL, O_LOGLEVEL },
	{ "admin-slots", required_argument, NULL, O_ADMIN_SLOTS },
	{ "per-uid", required_argument, NULL, O_PER_UID },
	{ "negotiate-timeout-ms", required_argument, NULL, O_NEGOTIATE },
	{ "reset-evict-ms", required_argument, NULL, O_EVICT },
	{ "vram-prealloc", required_argument, NULL, O_PREALLOC },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

/* Flag -> (section, key) of the configuration. */
static const struct { int opt; const char *section, *key; } flag_keys[] = {
	{ O_RUNTIME, "paths", "runtime_dir" }, { O_STATE, "paths", "state_dir" },
	{ O_VRAM, "gpu", "vram" }, { O_MAXVFS, "pf", "max_vfs" }, { O_NUMVFS, "pf", "num_vfs" },
	{ O_SPARE, "pf", "spare_vram" }, { O_MODEL, "gpu", "model" },
	{ O_POLICY, "sched", "policy" }, { O_QUANTUM_US, "sched", "quantum_us" },
	{ O_QUANTUM_MS, "sched", "quantum_ms" }, { O_GROUP, "control", "admin_group" },
	{ O_MODE, "control", "socket_mode" }, { O_ADMIN_SLOTS, "control", "admin_slots" },
	{ O_PER_UID, "control", "per_uid" }, { O_NEGOTIATE, "control", "negotiate_timeout_ms" },
	{ O_EVICT, "pf", "reset_evict_ms" }, { O_PREALLOC, "pf", "vram_prealloc" },
};

static int apply_flag(struct pf_config *cfg, int opt, const char *arg)
{
	enum cmn_log_level lvl;

	if (opt == O_LOGLEVEL) {
		if (cmn_log_parse_level(arg, &lvl))
			return -EINVAL;
		cmn_log_set_level(lvl);
		return 0;
	}
	for (unsigned int i = 0; i < sizeof(flag_keys) / sizeof(flag_keys[0]); i++)
		if (flag_keys[i].opt == opt)
			return pf_config_set(cfg, flag_keys[i].section, flag_keys[i].key, arg);
	return -EINVAL;
}

/* The form flag @opt's value takes, if "bad value" does not say enough; else "". */
static const char *flag_expect(int opt)
{
	const char *e = NULL;

	for (unsigned int i = 0; i < sizeof(flag_keys) / sizeof(flag_keys[0]); i++)
		if (flag_keys[i].opt == opt)
			e = pf_config_expect(flag_keys[i].section, flag_keys[i].key);
	return e ? e : "";
}

/* The long name of option @val. */
static const char *opt_name(int val)
{
	for (const struct option *o = opts; o->name; o++)
		if (o->val == val)
			return o->name;
	return "?";
}

static void ready(void)
{
	fflush(stderr);
}

/* SVA copies are process_vm_readv/writev, which the kernel allows on a process this
 * daemon may trace, checked at each copy under the target's exec lock. With
 * CAP_SYS_PTRACE effective that is every process, so a binding would follow its guest
 * through an exec of a set-user-ID program; without it, only processes of this daemon's
 * uid that are still dumpable (an exec that changes credentials clears that) and whose
 * permitted capabilities are within this daemon's. It stays permitted, for that last
 * check: a root guest keeps all of root's. Dropped before any thread starts
 * (capabilities are per thread). */
static int drop_ptrace(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct c[_LINUX_CAPABILITY_U32S_3];
	const uint32_t bit = CAP_TO_MASK(CAP_SYS_PTRACE);
	const unsigned int w = CAP_TO_INDEX(CAP_SYS_PTRACE);

	if (syscall(SYS_capget, &h, c))
		return -errno;
	c[w].effective &= ~bit;
	c[w].inheritable &= ~bit;
	if (syscall(SYS_capset, &h, c))
		return -errno;
	return 0;
}

int main(int argc, char **argv)
{
	struct pf_config cfg;
	struct pf_daemon *d;
	const char *config = NULL;
	char err[512];
	int c, r;

	r = drop_ptrace();
	if (r) {
		fprintf(stderr, "vgpud: cannot drop CAP_SYS_PTRACE: %s\n", cmn_strerror(r));
		return 1;
	}
	pf_config_defaults(&cfg);
	if (!getenv("VGPU_LOG"))
		cmn_log_set_level(VGPU_LOG_INFO);
	/* First pass: only --config, so that flags given anywhere override the file. */
	while ((c = getopt_long(argc, argv, "c:hV", opts, NULL)) != -1) {
		if (c == 'c')
			config = optarg;
		else if (c == 'h')
			return usage(stdout), 0;
		else if (c == 'V')
			return printf("vgpud %s\n", VGPU_VERSION), 0;
		else if (c == '?')
			return usage(stderr), 2;
	}
	if (optind < argc) {
		fprintf(stderr, "vgpud: unexpected argument \"%s\"\n", argv[optind]);
		return 2;
	}
	/* A file that cannot be read or holds a bad key is a configuration error: 2. */
	if (config && pf_config_load(&cfg, config, err, sizeof(err))) {
		fprintf(stderr, "vgpud: configuration: %s\n", err);
		return 2;
	}
	optind = 1;
	while ((c = getopt_long(argc, argv, "c:hV", opts, NULL)) != -1) {
		r = c >= 256 ? apply_flag(&cfg, c, optarg) : 0;
		if (r) {
			fprintf(stderr, "vgpud: bad value \"%s\" for --%s%s%s%s\n", optarg,
				opt_name(c), *flag_expect(c) ? " (" : "", flag_expect(c),
				*flag_expect(c) ? ")" : "");
			return 2;
		}
	}
	if (pf_config_check(&cfg, err, sizeof(err))) {
		fprintf(stderr, "vgpud: configuration: %s\n", err);
		return 2;
	}
	r = pf_daemon_create(&cfg, &d);
	if (r == -EBADMSG) {
		fprintf(stderr, "vgpud: cannot start: the state in %s is refused (exit %d: a "
			"restart refuses it again)\n", cfg.state_dir, VGPUD_EXIT_STATE);
		return VGPUD_EXIT_STATE;
	}
	if (r) {
		fprintf(stderr, "vgpud: cannot start: %s\n", cmn_strerror(r));
		return 1;
	}
	r = pf_daemon_run(d, ready);
	pf_daemon_destroy(d);
	return r ? 1 : 0;
}

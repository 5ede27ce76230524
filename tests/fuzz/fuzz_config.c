// SPDX-License-Identifier: MIT
/* fuzz_config: vgpud's INI configuration (pf_manager/config.c). The file is the admin's, but
 * it is read as root at every start, so a typo must never crash the daemon: each input is
 * written to a memfd and read through pf_config_load() by its /proc/self/fd path, exactly as
 * vgpud reads --config (its own line reader, the per-line and repeated-key checks, then the
 * keys), and pf_config_check() judges the result. A refused file must leave the
 * configuration as it was; one the check accepts must be usable: the fair share of every VF
 * count is computed from it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pf_manager/pf_manager.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fz_fd = -1;
static char fz_path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pf_config cfg, before;
	char err[512];

	if (size > (64u << 10))
		return 0;
	if (fz_fd < 0) {
		fz_fd = memfd_create("fuzz_config.ini", MFD_CLOEXEC);
		if (fz_fd < 0)
			abort();
		snprintf(fz_path, sizeof(fz_path), "/proc/self/fd/%d", fz_fd);
	}
	if (ftruncate(fz_fd, 0) || (size && pwrite(fz_fd, data, size, 0) != (ssize_t)size))
		abort();
	memset(&cfg, 0, sizeof(cfg));
	pf_config_defaults(&cfg);
	before = cfg;
	if (pf_config_load(&cfg, fz_path, err, sizeof(err))) {
		if (memcmp(&cfg, &before, sizeof(cfg)))
			abort();	/* a refused file changed the configuration */
		return 0;
	}
	if (pf_config_check(&cfg, err, sizeof(err)) == 0) {
		for (unsigned int n = 1; n <= cfg.max_vfs; n++)
			(void)pf_fair_vram(cfg.vram_size - cfg.spare_vram, n);
	}
	return 0;
}

// SPDX-License-Identifier: MIT
/* fuzz_config: vgpud's INI configuration (pf_manager/config.c) from memory. The file is the
 * admin's, but it is read as root at every start, so a typo must never crash the daemon:
 * inih's ini_parse_string() feeds each key to pf_config_set() exactly as pf_config_load()'s
 * callback does (stop at the first bad key), then pf_config_check() judges the result.
 * A configuration the check accepts must be usable: the fair share of every VF count is
 * computed from it. */
#include <ini.h>
#include <stdlib.h>
#include <string.h>

#include "pf_manager/pf_manager.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct fz_ctx {
	struct pf_config cfg;
	int bad;
};

static int fz_cb(void *user, const char *section, const char *key, const char *value)
{
	struct fz_ctx *x = user;

	if (pf_config_set(&x->cfg, section, key, value)) {
		x->bad = 1;
		return 0;
	}
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_ctx x = { .bad = 0 };
	char err[256];
	char *text;

	if (size > (64u << 10))
		return 0;
	text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = 0;
	memset(&x.cfg, 0, sizeof(x.cfg));
	pf_config_defaults(&x.cfg);
	if (ini_parse_string(text, fz_cb, &x) == 0 && !x.bad &&
	    pf_config_check(&x.cfg, err, sizeof(err)) == 0) {
		for (unsigned int n = 1; n <= x.cfg.max_vfs; n++)
			(void)pf_fair_vram(x.cfg.vram_size - x.cfg.spare_vram, n);
	}
	free(text);
	return 0;
}

// SPDX-License-Identifier: MIT
/* fuzz_state: vgpud's state loader (pf_manager/state.c, pf_state_load()): the slice
 * definition files and the allocation journal that a restarted daemon trusts. They are
 * root's files, but a crash mid-write, a full disk or a hand edit can leave anything there,
 * and the loader must refuse it whole with a message rather than crash or half-apply it.
 * The input is files separated by a line "%%": each but the last is "NAME\n" then the
 * content of state/slices/NAME, the last is state/journal.json. "@I@" in the journal stands
 * for this daemon's instance name (it depends on the state directory's path). The daemon is
 * an in-memory one (types, no device) and no VRAM object exists, so every running slice in
 * a journal that passes the checks comes back stopped: nothing is brought up. Checks: a
 * refused state leaves no slice defined. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "pf_manager/pf_internal.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct pf_daemon fz_d;
static char fz_dir[64], fz_slices[96], fz_journal[96], fz_instance[64];

static void fz_quiet(enum cmn_log_level level, const char *msg, void *ctx)
{
	(void)level; (void)msg; (void)ctx;
}

static void fz_clean(void)
{
	char path[256];
	struct dirent *de;
	DIR *dp = opendir(fz_slices);

	while (dp && (de = readdir(dp))) {
		if (de->d_name[0] == '.' && (!de->d_name[1] || !strcmp(de->d_name, "..")))
			continue;
		snprintf(path, sizeof(path), "%s/%s", fz_slices, de->d_name);
		unlink(path);
	}
	if (dp)
		closedir(dp);
	unlink(fz_journal);
}

static void fz_remove_dir(void)
{
	fz_clean();
	rmdir(fz_slices);
	rmdir(fz_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char real[4096];

	(void)argc; (void)argv;
	cmn_log_set_sink(fz_quiet, NULL);	/* every refusal logs its reason */
	strcpy(fz_dir, "/tmp/vgpu-fuzz-state-XXXXXX");
	if (!mkdtemp(fz_dir) || !realpath(fz_dir, real))
		abort();
	atexit(fz_remove_dir);
	snprintf(fz_slices, sizeof(fz_slices), "%s/slices", fz_dir);
	snprintf(fz_journal, sizeof(fz_journal), "%s/journal.json", fz_dir);
	snprintf(fz_instance, sizeof(fz_instance), "vgpud-%016" PRIx64, pf_hash64(real));
	pf_config_defaults(&fz_d.cfg);
	strcpy(fz_d.cfg.model, "fuzz");
	fz_d.cfg.vram_size = 1ull << 30;
	fz_d.cfg.spare_vram = 64ull << 20;
	fz_d.cfg.max_vfs = 4;
	snprintf(fz_d.cfg.state_dir, sizeof(fz_d.cfg.state_dir), "%s", fz_dir);
	fz_d.ctl_fd = -1;
	fz_d.sig_fd = -1;
	pf_types_build(&fz_d);
	return 0;
}

static void fz_write(const char *path, const char *p, size_t n)
{
	FILE *f = fopen(path, "we");

	if (!f)
		return;
	fwrite(p, 1, n, f);
	fclose(f);
}

/* The journal with "@I@" replaced by the instance name. */
static void fz_write_journal(const char *p, size_t n)
{
	char *out = malloc(n * (sizeof(fz_instance) / 3 + 1) + 1);
	size_t o = 0;

	if (!out)
		return;
	for (size_t i = 0; i < n; i++) {
		if (i + 3 <= n && !memcmp(p + i, "@I@", 3)) {
			o += (size_t)sprintf(out + o, "%s", fz_instance);
			i += 2;
		} else {
			out[o++] = p[i];
		}
	}
	fz_write(fz_journal, out, o);
	free(out);
}

static const char *fz_find(const char *p, size_t n, const char *sep, size_t seplen)
{
	for (size_t i = 0; i + seplen <= n; i++)
		if (!memcmp(p + i, sep, seplen))
			return p + i;
	return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data, *sep;
	size_t n = size;
	int r;

	if (size > (256u << 10))
		return 0;
	fz_clean();
	if (pf_mkdir_p(fz_slices, 0750))
		abort();
	while ((sep = fz_find(p, n, "\n%%\n", 4))) {
		const char *nl = memchr(p, '\n', (size_t)(sep - p) + 1);
		size_t namelen = (size_t)(nl - p);
		char name[128], path[256];

		if (namelen && namelen < sizeof(name) && !memchr(p, '/', namelen) &&
		    !memchr(p, 0, namelen) && !(p[0] == '.' && (namelen == 1 ||
		    (namelen == 2 && p[1] == '.')))) {
			memcpy(name, p, namelen);
			name[namelen] = 0;
			snprintf(path, sizeof(path), "%s/%s", fz_slices, name);
			fz_write(path, nl + 1, nl < sep ? (size_t)(sep - nl - 1) : 0);
		}
		n -= (size_t)(sep + 4 - p);
		p = sep + 4;
	}
	if (n)
		fz_write_journal(p, n);
	fz_d.num_vfs = 0;
	r = pf_state_load(&fz_d);
	if (r && fz_d.nr_slices)
		abort();	/* a refused state left slices defined */
	for (unsigned int i = 0; i < fz_d.nr_slices; i++)
		pf_slice_free(fz_d.slices[i]);
	fz_d.nr_slices = 0;
	for (unsigned int vf = 0; vf <= PF_MAX_VFS; vf++)
		if (fz_d.vfs[vf])
			abort();	/* something was brought up without a VRAM object */
	return 0;
}

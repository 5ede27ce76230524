// SPDX-License-Identifier: MIT
/* fuzz_control: vgpud's control socket as a local client drives it (pf_manager/control.c,
 * commands.c, slice.c, state.c's slice spec parser). The input's first byte picks the path:
 *   bit 0 clear: the bytes arrive on a socketpair and pf_client_io() frames them into lines,
 *     as an unprivileged client (mutating verbs are refused, queries run);
 *   bit 0 set: each line is parsed and handed to the real dispatcher, pf_command(), as an
 *     admin client, with every request forced to "dry-run" so nothing is written.
 * Bit 1 says whether the client has already negotiated. The daemon is an in-memory one: a
 * VRAM allocator, the type table and a few defined (stopped) slices; no device, no RM, no
 * files. Nothing a dry run or a refusal does changes it, so each input starts the same. */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "pf_manager/pf_internal.h"
#include "pma/pma.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct pf_daemon *fz_d;

static const char *const fz_slices[] = {
	"{\"uuid\": \"8a4c1c2e-55f1-4c0e-9a57-0d8d3c6e0001\", \"type\": \"fuzz-256M\"}",
	("{\"uuid\": \"8a4c1c2e-55f1-4c0e-9a57-0d8d3c6e0002\", \"type\": \"fuzz-auto\", "
	 "\"start\": \"auto\", \"owner\": {\"vm\": \"11111111-2222-3333-4444-555555555555\", "
	 "\"generation\": 3}, \"owner_uid\": 1000}"),
	("{\"uuid\": \"8a4c1c2e-55f1-4c0e-9a57-0d8d3c6e0003\", \"type\": \"fuzz-128M\", "
	 "\"attrs\": [{\"vram\": \"64M\"}, {\"channels\": 4}, {\"priority\": \"low\"}]}"),
};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct pma_region_desc desc = { .base = 0, .performance = 1 };
	struct pf_daemon *d = calloc(1, sizeof(*d));

	(void)argc; (void)argv;
	cmn_log_set_level(VGPU_LOG_ERR);
	if (!d)
		abort();
	pf_config_defaults(&d->cfg);
	strcpy(d->cfg.model, "fuzz");
	strcpy(d->cfg.pf_id, "fuzz-pf");
	d->cfg.vram_size = 1ull << 30;
	d->cfg.spare_vram = 64ull << 20;
	d->cfg.max_vfs = 4;
	d->cfg.max_line = 1024;
	strcpy(d->cfg.state_dir, "/nonexistent/fuzz-state");
	strcpy(d->cfg.runtime_dir, "/nonexistent/fuzz-run");
	d->num_vfs = 4;
	d->ctl_fd = -1;
	d->sig_fd = -1;
	d->pma = pma_create(NULL);
	desc.size = d->cfg.vram_size;
	if (!d->pma || pma_region_add(d->pma, &desc, NULL, 0) < 0)
		abort();
	d->pma_free_at_start = pma_free_bytes(d->pma);
	pf_types_build(d);
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(fz_slices); i++) {
		struct pf_slice *s = calloc(1, sizeof(*s));
		json_object *o = json_tokener_parse(fz_slices[i]);
		struct pf_err e = { 0 };

		if (!s || !o || pf_slice_from_json(d, o, s, &e))
			abort();
		json_object_put(o);
		d->slices[d->nr_slices++] = s;
	}
	fz_d = d;
	return 0;
}

/* Make @req a dry run unless its "dry-run" is malformed (that error path is kept). */
static void force_dry(json_object *req)
{
	json_object *args, *dv;

	if (!json_object_is_type(req, json_type_object))
		return;
	if (!json_object_object_get_ex(req, "arguments", &args)) {
		args = json_object_new_object();
		json_object_object_add(req, "arguments", args);
	}
	if (!json_object_is_type(args, json_type_object))
		return;
	if (json_object_object_get_ex(args, "dry-run", &dv) &&
	    !json_object_is_type(dv, json_type_boolean))
		return;
	json_object_object_add(args, "dry-run", json_object_new_boolean(1));
}

static void fuzz_dispatch(struct pf_client *c, const char *p, size_t n)
{
	while (n) {
		const char *nl = memchr(p, '\n', n);
		size_t len = nl ? (size_t)(nl - p) : n;
		struct json_tokener *tok = json_tokener_new();
		json_object *req = json_tokener_parse_ex(tok, p, (int)len);

		/* As client_line() takes a line: one value, no object repeating a key. */
		if (req && json_tokener_get_parse_end(tok) == len &&
		    !pf_json_dup_check(p, len, req, NULL, 0)) {
			force_dry(req);
			json_object_put(pf_command(fz_d, c, req));
		}
		json_object_put(req);
		json_tokener_free(tok);
		p += len + (nl != NULL);
		n -= len + (nl != NULL);
	}
}

static void drain(int fd)
{
	char buf[16384];

	while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
		;
}

static void fuzz_socket(struct pf_client *c, const uint8_t *p, size_t n)
{
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv))
		abort();
	c->fd = sv[0];
	c->uid = 1000;
	fz_d->clients[0] = c;
	while (n && fz_d->clients[0]) {
		ssize_t w = send(sv[1], p, n, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (w <= 0)
			break;
		p += w;
		n -= (size_t)w;
		/* Each call reads at most 16 KiB: call until the socket is empty. */
		for (size_t left = (size_t)w + 16384; left >= 16384 && fz_d->clients[0]; left -= 16384) {
			pf_client_io(fz_d, 0, POLLIN);
			drain(sv[1]);
		}
	}
	pf_control_close(fz_d);		/* frees the client unless it was dropped */
	close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pf_client *c;

	if (size < 1 || size > (256u << 10))
		return 0;
	c = calloc(1, sizeof(*c));
	if (!c)
		return 0;
	c->negotiated = data[0] & 2;
	if (data[0] & 1) {
		c->admin = true;
		c->fd = -1;
		fuzz_dispatch(c, (const char *)data + 1, size - 1);
		free(c->in);
		free(c->out);
		free(c);
	} else {
		fuzz_socket(c, data + 1, size - 1);
	}
	return 0;
}

// SPDX-License-Identifier: MIT
/* fuzz_meta: vgpu-vm's <metadata> reader (vmm_glue/meta.c). The domain XML comes from
 * whoever may define a libvirt domain, and the qemu hook parses it as root. Checks: the
 * parser never faults or leaks, and metadata it accepts survives a round trip through
 * vmm_meta_xml() (what vgpu-vm writes) unchanged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fail.h"
#include "vmm_glue/vmm_glue.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fz_round_trip(const struct vmm_meta *m)
{
	static const char head[] = "<domain><metadata>", tail[] = "</metadata></domain>";
	struct cmn_fail e = { 0 };
	struct vmm_meta back;
	char *inner = vmm_meta_xml(m), *doc;
	size_t len;

	if (!inner)
		return;
	len = strlen(head) + strlen(inner) + strlen(tail) + 1;
	doc = malloc(len);
	if (doc) {
		snprintf(doc, len, "%s%s%s", head, inner, tail);
		if (vmm_meta_parse(doc, &back, NULL, &e) || strcmp(back.slice, m->slice) ||
		    strcmp(back.socket, m->socket) || strcmp(back.vm, m->vm) ||
		    back.generation != m->generation) {
			fprintf(stderr, "round trip changed the metadata: %s\n", doc);
			abort();
		}
	}
	free(doc);
	free(inner);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cmn_fail e = { 0 };
	struct vmm_meta m;
	char uuid[VMM_UUID_LEN];
	char *xml;

	if (size > (64u << 10))
		return 0;
	xml = malloc(size + 1);
	if (!xml)
		return 0;
	memcpy(xml, data, size);
	xml[size] = 0;
	if (vmm_meta_parse(xml, &m, uuid, &e) == 0)
		fz_round_trip(&m);
	free(xml);
	return 0;
}

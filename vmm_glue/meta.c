// SPDX-License-Identifier: MIT
/* Our <metadata> element read back from a domain XML (libvirt's, or the hook's stdin). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/parser.h>
#include <libxml/tree.h>

#include "ctlclient/ctlclient.h"
#include "vmm_glue/vmm_internal.h"

static bool node_is(const xmlNode *n, const char *name, const char *ns)
{
	if (n->type != XML_ELEMENT_NODE || strcmp((const char *)n->name, name))
		return false;
	if (!ns)
		return !n->ns;
	return n->ns && n->ns->href && !strcmp((const char *)n->ns->href, ns);
}

static xmlNode *child(const xmlNode *parent, const char *name, const char *ns)
{
	for (xmlNode *n = parent ? parent->children : NULL; n; n = n->next)
		if (node_is(n, name, ns))
			return n;
	return NULL;
}

/* Attribute @name of @n into @out (at most @len with the NUL); false if absent or too long. */
static bool attr(xmlNode *n, const char *name, char *out, size_t len)
{
	xmlChar *v = n ? xmlGetProp(n, (const xmlChar *)name) : NULL;
	bool ok = v && strlen((const char *)v) < len;

	if (ok)
		snprintf(out, len, "%s", (const char *)v);
	xmlFree(v);
	return ok;
}

static int meta_from(xmlNode *vm, struct vmm_meta *m, struct cmn_fail *e)
{
	xmlNode *slice = child(vm, "slice", VMM_NS_URI), *owner = child(vm, "owner", VMM_NS_URI);
	char gen[24] = "0", *end;

	memset(m, 0, sizeof(*m));
	if (!attr(slice, "uuid", m->slice, sizeof(m->slice)) || ctlc_uuid_parse(m->slice, NULL, NULL))
		return cmn_fail(e, -EINVAL, "vGPU metadata: <slice uuid=...> is missing or not a UUID");
	if (!attr(slice, "socket", m->socket, sizeof(m->socket)) || m->socket[0] != '/')
		return cmn_fail(e, -EINVAL, "vGPU metadata of slice %s: <slice socket=...> is "
				"missing or not an absolute path", m->slice);
	if (!attr(owner, "vm", m->vm, sizeof(m->vm)) || ctlc_uuid_parse(m->vm, NULL, NULL))
		return cmn_fail(e, -EINVAL, "vGPU metadata of slice %s: <owner vm=...> is missing "
				"or not a UUID", m->slice);
	if (owner && xmlHasProp(owner, (const xmlChar *)"generation") &&
	    !attr(owner, "generation", gen, sizeof(gen)))
		return cmn_fail(e, -EINVAL, "vGPU metadata: bad owner generation");
	errno = 0;
	m->generation = strtoull(gen, &end, 10);
	if (errno || *end || gen[0] == '-' || !gen[0])
		return cmn_fail(e, -EINVAL, "vGPU metadata of slice %s: owner generation \"%s\" "
				"is not a number", m->slice, gen);
	return 0;
}

int vmm_meta_parse(const char *xml, struct vmm_meta *m, char *dom_uuid, struct cmn_fail *e)
{
	xmlDoc *doc;
	xmlNode *root, *vm, *u;
	int r;

	if (dom_uuid)
		dom_uuid[0] = 0;
	/* No network, no entities: the XML may come from anyone who can define a domain. */
	doc = xmlReadMemory(xml, (int)strlen(xml), "domain.xml", NULL,
			    XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
	if (!doc)
		return cmn_fail(e, -EINVAL, "the domain XML is not well-formed");
	root = xmlDocGetRootElement(doc);
	if (!root || !node_is(root, "domain", NULL)) {
		r = cmn_fail(e, -EINVAL, "the XML is not a <domain>");
		goto free_doc;
	}
	u = child(root, "uuid", NULL);
	if (dom_uuid && u) {
		xmlChar *t = xmlNodeGetContent(u);

		snprintf(dom_uuid, VMM_UUID_LEN, "%s", t && strlen((char *)t) < VMM_UUID_LEN ?
			 (char *)t : "");
		xmlFree(t);
	}
	vm = child(child(root, "metadata", NULL), "vm", VMM_NS_URI);
	if (!vm) {
		r = cmn_fail(e, -ENOENT, "the domain has no vGPU metadata (%s)", VMM_NS_URI);
		goto free_doc;
	}
	r = meta_from(vm, m, e);
free_doc:
	xmlFreeDoc(doc);
	return r;
}

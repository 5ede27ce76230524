// SPDX-License-Identifier: MIT
/* Our <metadata> element read back from a domain XML (libvirt's, or the hook's stdin), and
 * whether the vgpud socket it names may be trusted. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* ---- the metadata's socket -------------------------------------------------------------- */

#define SOCK_NAME	"control.sock"		/* vgpud's, in its runtime directory */
#define LOCK_NAME	"vgpud.lock"		/* vgpud's lock there while it runs */

static bool owner_ok(const struct stat *st, uid_t uid)
{
	return st->st_uid == 0 || st->st_uid == uid;
}

/* "root", or "root or uid N" for a caller that is not root. */
static const char *owners(uid_t uid, char *buf, size_t len)
{
	if (!uid)
		return "root";
	snprintf(buf, len, "root or uid %u", (unsigned int)uid);
	return buf;
}

/* @dir and every directory above it: owned by root or @uid, and writable by no one else
 * unless sticky (/tmp), so no one else can put another socket in the path's place. */
static int socket_dirs_check(const char *path, char *dir, uid_t uid, struct cmn_fail *e)
{
	struct stat st;
	char who[32];

	for (;;) {
		if (lstat(dir, &st) || !S_ISDIR(st.st_mode))
			return cmn_fail(e, -EPERM, "vgpud socket %s refused: %s is not a directory",
					path, dir);
		if (!owner_ok(&st, uid))
			return cmn_fail(e, -EPERM, "vgpud socket %s refused: directory %s belongs "
					"to uid %u, not to %s", path, dir, (unsigned int)st.st_uid,
					owners(uid, who, sizeof(who)));
		if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
			return cmn_fail(e, -EPERM, "vgpud socket %s refused: directory %s is "
					"writable by others (mode %04o)", path, dir,
					(unsigned int)(st.st_mode & 07777));
		if (!strcmp(dir, "/"))
			return 0;
		*strrchr(dir, '/') = 0;
		if (!dir[0])
			strcpy(dir, "/");
	}
}

int vmm_meta_socket_check(const char *path, uid_t uid, struct cmn_fail *e)
{
	char real[PATH_MAX], dir[PATH_MAX], who[32];
	const char *base = strrchr(path, '/');
	struct stat st;

	if (path[0] != '/' || !base)
		return cmn_fail(e, -EPERM, "vgpud socket %s refused: not an absolute path", path);
	if (!realpath(path, real))
		return cmn_fail(e, -ECONNREFUSED, "vgpud is not reachable at %s: %s", path,
				strerror(errno));
	if (strcmp(real, path))
		return cmn_fail(e, -EPERM, "vgpud socket %s refused: the path goes through a "
				"symbolic link or is not canonical (it is %s)", path, real);
	if (strcmp(base + 1, SOCK_NAME))
		return cmn_fail(e, -EPERM, "vgpud socket %s refused: vgpud's control socket is "
				"named %s", path, SOCK_NAME);
	if (lstat(path, &st) || !S_ISSOCK(st.st_mode))
		return cmn_fail(e, -EPERM, "vgpud socket %s refused: not a socket", path);
	if (!owner_ok(&st, uid))
		return cmn_fail(e, -EPERM, "vgpud socket %s refused: it belongs to uid %u, not "
				"to %s", path, (unsigned int)st.st_uid,
				owners(uid, who, sizeof(who)));
	snprintf(dir, sizeof(dir), "%.*s", (int)(base - path), path);
	if (!dir[0])
		strcpy(dir, "/");
	if (snprintf(real, sizeof(real), "%s/%s", dir, LOCK_NAME) >= (int)sizeof(real) ||
	    lstat(real, &st) || !S_ISREG(st.st_mode) || !owner_ok(&st, uid))
		return cmn_fail(e, -EPERM, "vgpud socket %s refused: %s is not a vgpud runtime "
				"directory (no %s of %s there)", path, dir, LOCK_NAME,
				owners(uid, who, sizeof(who)));
	return socket_dirs_check(path, dir, uid, e);
}

int vmm_meta_socket(const struct vmm_meta *m, const char *override, const char **sock,
		    struct cmn_fail *e)
{
	*sock = override ? override : m->socket;
	return override ? 0 : vmm_meta_socket_check(m->socket, geteuid(), e);
}

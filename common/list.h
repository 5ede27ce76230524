/* SPDX-License-Identifier: MIT */
/* common/list.h - intrusive circular doubly-linked list (the kernel's list_head shape).
 * An empty list points at itself; a node removed with cmn_list_del() is left empty, so
 * deleting it twice is harmless. Header-only. */
#ifndef VGPU_COMMON_LIST_H
#define VGPU_COMMON_LIST_H

#include <stdbool.h>

struct cmn_list {
	struct cmn_list *prev, *next;
};

/* Make @l an empty list (or an unlinked node). */
static inline void cmn_list_init(struct cmn_list *l)
{
	l->prev = l->next = l;
}

/* True if @l has no entries (or, for a node, is not on a list). */
static inline bool cmn_list_empty(const struct cmn_list *l)
{
	return l->next == l;
}

/* Insert @n right after @head. */
static inline void cmn_list_add(struct cmn_list *head, struct cmn_list *n)
{
	n->next = head->next;
	n->prev = head;
	head->next->prev = n;
	head->next = n;
}

/* Unlink @n and leave it empty. */
static inline void cmn_list_del(struct cmn_list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	cmn_list_init(n);
}

#endif

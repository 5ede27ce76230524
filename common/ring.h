/* SPDX-License-Identifier: MIT */
/* common/ring.h - lock-free single-producer/single-consumer ring over shared memory.
 *
 * Layout in include/vgpu/ring.h. One thread (or process) produces, one consumes; neither
 * takes a lock. Ordering: the producer fills a slot, then publishes head with a release
 * store; the consumer reads head with acquire before touching the slot, and gives the slot
 * back by publishing tail with release. The peer may be hostile (a guest): a head that
 * claims more than nr_elems pending slots is reported as -EPROTO, never followed.
 * Header-only so the guest driver can use it without linking host code. */
#ifndef VGPU_COMMON_RING_H
#define VGPU_COMMON_RING_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include <vgpu/ring.h>

/* A process-local view: geometry is copied at attach so the peer cannot change it. */
struct cmn_ring {
	struct vgpu_ring_hdr *hdr;
	uint8_t *slots;
	uint32_t mask;		/* nr_elems - 1 */
	uint32_t elem_size;
	uint32_t cached_head;	/* producer: own head; consumer: last head seen */
	uint32_t cached_tail;	/* consumer: own tail; producer: last tail seen */
};

#define cmn_ring_head_(h) ((_Atomic uint32_t *)&(h)->head)
#define cmn_ring_tail_(h) ((_Atomic uint32_t *)&(h)->tail)

/* Bytes of shared memory for @nr_elems slots of @elem_size bytes. */
static inline size_t cmn_ring_bytes(uint32_t nr_elems, uint32_t elem_size)
{
	return sizeof(struct vgpu_ring_hdr) + (size_t)nr_elems * elem_size;
}

/* Write an empty ring header into @mem. 0, or -EINVAL for bad geometry or short @bytes. */
static inline int cmn_ring_format(void *mem, size_t bytes, uint32_t nr_elems, uint32_t elem_size)
{
	struct vgpu_ring_hdr *h = (struct vgpu_ring_hdr *)mem;

	if (!mem || !nr_elems || (nr_elems & (nr_elems - 1)) || !elem_size || elem_size % 8 ||
	    nr_elems > (1u << 24) || cmn_ring_bytes(nr_elems, elem_size) > bytes)
		return -EINVAL;
	memset(h, 0, sizeof(*h));
	h->nr_elems = nr_elems;
	h->elem_size = elem_size;
	atomic_store_explicit(cmn_ring_head_(h), 0, memory_order_relaxed);
	atomic_store_explicit(cmn_ring_tail_(h), 0, memory_order_relaxed);
	/* Magic last: a peer that sees it sees a complete header. */
	atomic_store_explicit((_Atomic uint32_t *)&h->magic, VGPU_RING_MAGIC, memory_order_release);
	return 0;
}

/* Attach a local view to a formatted ring. 0, or -EPROTO if the header is not valid
 * for @bytes (a peer's ring is checked as untrusted input). */
static inline int cmn_ring_attach(struct cmn_ring *r, void *mem, size_t bytes)
{
	struct vgpu_ring_hdr *h = (struct vgpu_ring_hdr *)mem;
	uint32_t nr, es;

	if (!mem || bytes < sizeof(*h) ||
	    atomic_load_explicit((_Atomic uint32_t *)&h->magic, memory_order_acquire) != VGPU_RING_MAGIC)
		return -EPROTO;
	nr = h->nr_elems;
	es = h->elem_size;
	if (!nr || (nr & (nr - 1)) || !es || es % 8 || nr > (1u << 24) ||
	    cmn_ring_bytes(nr, es) > bytes)
		return -EPROTO;
	r->hdr = h;
	r->slots = (uint8_t *)(h + 1);
	r->mask = nr - 1;
	r->elem_size = es;
	r->cached_head = atomic_load_explicit(cmn_ring_head_(h), memory_order_acquire);
	r->cached_tail = atomic_load_explicit(cmn_ring_tail_(h), memory_order_acquire);
	return 0;
}

/* Producer: slot to fill next, or NULL if the ring is full (or the peer's tail is bogus). */
static inline void *cmn_ring_produce_slot(struct cmn_ring *r)
{
	uint32_t head = r->cached_head;

	if (head - r->cached_tail > r->mask) {
		r->cached_tail = atomic_load_explicit(cmn_ring_tail_(r->hdr), memory_order_acquire);
		/* A tail ahead of head is a broken peer: treat as full, never overwrite. */
		if (head - r->cached_tail > r->mask)
			return NULL;
	}
	return r->slots + (size_t)(head & r->mask) * r->elem_size;
}

/* Producer: publish the slot returned by cmn_ring_produce_slot(). */
static inline void cmn_ring_produce_commit(struct cmn_ring *r)
{
	r->cached_head++;
	atomic_store_explicit(cmn_ring_head_(r->hdr), r->cached_head, memory_order_release);
}

/* Producer: copy @len bytes (<= elem_size; the rest of the slot is zeroed) and publish.
 * 0, -EAGAIN if full, -EMSGSIZE if @len is too big. */
static inline int cmn_ring_push(struct cmn_ring *r, const void *elem, size_t len)
{
	void *slot;

	if (len > r->elem_size)
		return -EMSGSIZE;
	slot = cmn_ring_produce_slot(r);
	if (!slot)
		return -EAGAIN;
	memcpy(slot, elem, len);
	memset((uint8_t *)slot + len, 0, r->elem_size - len);
	cmn_ring_produce_commit(r);
	return 0;
}

/* Consumer: next filled slot, or NULL if empty. *@err is set to -EPROTO (and NULL returned)
 * if the peer's head claims more slots than the ring has. */
static inline const void *cmn_ring_consume_slot(struct cmn_ring *r, int *err)
{
	uint32_t tail = r->cached_tail;

	*err = 0;
	if (tail == r->cached_head) {
		r->cached_head = atomic_load_explicit(cmn_ring_head_(r->hdr), memory_order_acquire);
		if (tail == r->cached_head)
			return NULL;
	}
	if (r->cached_head - tail > r->mask + 1) {
		*err = -EPROTO;
		r->cached_head = tail;
		return NULL;
	}
	return r->slots + (size_t)(tail & r->mask) * r->elem_size;
}

/* Consumer: hand the slot from cmn_ring_consume_slot() back to the producer. */
static inline void cmn_ring_consume_commit(struct cmn_ring *r)
{
	r->cached_tail++;
	atomic_store_explicit(cmn_ring_tail_(r->hdr), r->cached_tail, memory_order_release);
}

/* Consumer: copy the next element (elem_size bytes) to @out.
 * 0, -EAGAIN if empty, -EPROTO if the producer is broken. */
static inline int cmn_ring_pop(struct cmn_ring *r, void *out)
{
	int err;
	const void *slot = cmn_ring_consume_slot(r, &err);

	if (!slot)
		return err ? err : -EAGAIN;
	memcpy(out, slot, r->elem_size);
	cmn_ring_consume_commit(r);
	return 0;
}

/* Slots pending as seen from either side right now (a snapshot; 0..nr_elems). */
static inline uint32_t cmn_ring_count(const struct cmn_ring *r)
{
	uint32_t h = atomic_load_explicit(cmn_ring_head_(r->hdr), memory_order_acquire);
	uint32_t t = atomic_load_explicit(cmn_ring_tail_(r->hdr), memory_order_acquire);
	uint32_t n = h - t;

	return n > r->mask + 1 ? r->mask + 1 : n;
}

/* Number of slots. */
static inline uint32_t cmn_ring_capacity(const struct cmn_ring *r)
{
	return r->mask + 1;
}

#endif

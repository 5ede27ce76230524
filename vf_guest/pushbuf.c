// SPDX-License-Identifier: MIT
/* Pushbuffer builder for the method set of vgpu/gpfifo.h. Each helper writes one method:
 * a header (id << 16 | argument count) and its argument dwords, 64-bit values low dword
 * first. A method that does not fit is dropped whole and leaves pb->err = -ENOSPC, so a
 * caller checks once after building instead of after every method. */
#include <errno.h>
#include <string.h>

#include <vgpu/gpfifo.h>

#include "vf_guest/include/vgpu_vf.h"

#define LO(x)	((uint32_t)(x))
#define HI(x)	((uint32_t)((uint64_t)(x) >> 32))

void vgpu_pb_init(struct vgpu_pb *pb, uint32_t *buf, uint32_t cap)
{
	pb->dw = buf;
	pb->len = 0;
	pb->cap = cap;
	pb->err = 0;
}

void vgpu_pb_method(struct vgpu_pb *pb, uint32_t id, const uint32_t *args, uint32_t nargs)
{
	if (nargs > 0xffffu || pb->cap - pb->len < nargs + 1u) {
		pb->err = -ENOSPC;
		return;
	}
	pb->dw[pb->len++] = VGPU_MTHD(id, nargs);
	if (nargs)
		memcpy(&pb->dw[pb->len], args, nargs * sizeof(uint32_t));
	pb->len += nargs;
}

void vgpu_pb_nop(struct vgpu_pb *pb)
{
	vgpu_pb_method(pb, VGPU_M_NOP, NULL, 0);
}

void vgpu_pb_sem_release(struct vgpu_pb *pb, uint64_t va, uint64_t payload, uint32_t flags)
{
	const uint32_t a[] = { LO(va), HI(va), LO(payload), HI(payload), flags };

	vgpu_pb_method(pb, VGPU_M_SEM_RELEASE, a, 5);
}

void vgpu_pb_sem_acquire(struct vgpu_pb *pb, uint64_t va, uint64_t payload, uint32_t flags,
			 uint32_t timeout_us)
{
	const uint32_t a[] = { LO(va), HI(va), LO(payload), HI(payload), flags, timeout_us };

	vgpu_pb_method(pb, VGPU_M_SEM_ACQUIRE, a, 6);
}

void vgpu_pb_copy(struct vgpu_pb *pb, uint64_t src, uint64_t dst, uint64_t len)
{
	const uint32_t a[] = { LO(src), HI(src), LO(dst), HI(dst), LO(len), HI(len) };

	vgpu_pb_method(pb, VGPU_M_COPY, a, 6);
}

void vgpu_pb_fill(struct vgpu_pb *pb, uint64_t dst, uint64_t len, uint32_t value)
{
	const uint32_t a[] = { LO(dst), HI(dst), LO(len), HI(len), value };

	vgpu_pb_method(pb, VGPU_M_FILL, a, 5);
}

void vgpu_pb_invalidate(struct vgpu_pb *pb, uint64_t va, uint64_t size)
{
	const uint32_t a[] = { LO(va), HI(va), LO(size), HI(size), size ? 0 : VGPU_INVAL_ALL };

	vgpu_pb_method(pb, VGPU_M_MMU_INVALIDATE, a, 5);
}

void vgpu_pb_timestamp(struct vgpu_pb *pb, uint64_t va)
{
	const uint32_t a[] = { LO(va), HI(va) };

	vgpu_pb_method(pb, VGPU_M_TIMESTAMP, a, 2);
}

void vgpu_pb_reduce_add_u32(struct vgpu_pb *pb, uint64_t src, uint32_t count, uint64_t dst)
{
	const uint32_t a[] = { LO(src), HI(src), count, LO(dst), HI(dst) };

	vgpu_pb_method(pb, VGPU_M_REDUCE_ADD_U32, a, 5);
}

void vgpu_pb_axpy_f32(struct vgpu_pb *pb, uint64_t x, uint64_t y, uint32_t count, float a)
{
	uint32_t abits;

	memcpy(&abits, &a, sizeof(abits));
	const uint32_t args[] = { LO(x), HI(x), LO(y), HI(y), count, abits };

	vgpu_pb_method(pb, VGPU_M_AXPY_F32, args, 6);
}

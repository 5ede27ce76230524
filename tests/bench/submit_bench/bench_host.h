/* bench_host - an in-process host for submit_bench: the real emulated GPU (gpu_model) and
 * IOMMU (iommu_model) behind one VF, served to libvgpu-vf through a transport that hands it a
 * BAR2 laid out as vgpu/vf_bar.h plus the extension proposed in /work/briefs/abi-requests.md
 * (doorbell page, DMA IOVA, kick/GPU-interrupt vector), and a mailbox thread that answers
 * PING, GET_INFO and the RM calls the guest suite and the bench use. It was written when vgpud
 * could not serve usermode submission; it stays as the best case for the RPC path (a minimal
 * handler) and the host of --selftest (doc/bench/submit_bench.md). The mailbox thread sleeps
 * in poll() between requests, as vgpud's loop does. */
#ifndef VGPU_BENCH_HOST_H
#define VGPU_BENCH_HOST_H

#include <stdint.h>

struct bench_host;
struct vgpu_vf_transport;

/* A device with one VF of @vram bytes of VRAM and @dma bytes of DMA memory. */
int bench_host_create(uint64_t vram, uint64_t dma, struct bench_host **out);
void bench_host_destroy(struct bench_host *h);
/* A transport onto the VF (owned by whoever opens the VF with it). */
int bench_host_transport(struct bench_host *h, struct vgpu_vf_transport **out);
/* Mailbox requests served so far. */
uint64_t bench_host_requests(const struct bench_host *h);

#endif

/* SPDX-License-Identifier: MIT */
/* rm/gsp/fw - the emulated GSP firmware: the program vgpu-gsp.
 *
 * The device owner's CPU-RM (module rm_gsp) starts it with the queue memfd and the GPU's
 * privileged-state memfd inherited. One thread per lane reads commands, reassembles
 * continuation records, runs the RPC against the privileged region and writes the reply;
 * the main thread beats the heartbeat, posts the device's errors and faults as events and
 * runs the channel watchdog. A test build (-DVGPU_TEST_HOOKS, program vgpu-gsp-test) also
 * serves the test-only RPCs of rm/gsp/gsp_test_rpc.h; the release program does not.
 * gsp_fw_open() runs the same server without threads, one message per gsp_fw_step(). */
#ifndef VGPU_RM_GSP_FW_GSP_FW_H
#define VGPU_RM_GSP_FW_GSP_FW_H

/* Serve the queues in memfd @qfd and program privileged region @priv_fd (-1: none),
 * kicking the device's eventfd @kick_fd (-1: none) after each write; watch the device's
 * status region @status_fd (-1: none) for errors, faults and hung channels; take VRAM
 * slices from socket @fd_sock (-1: none); until the parent @ppid dies or the process is
 * killed. Returns an exit status. */
int gsp_fw_run(int qfd, int priv_fd, int kick_fd, int status_fd, int fd_sock, int ppid);

/* ---- the firmware in the caller's process, stepped by the caller (harnesses) ---- */
struct gsp_fw;
/* Attach to queue memfd @qfd (laid out and formatted by the CPU side) and privileged
 * region @priv_fd (-1: none; wiped first if the queues ask for it, as at a restart). No
 * thread, heartbeat, device watching or VRAM slices. 0 or -errno (logged). */
int gsp_fw_open(int qfd, int priv_fd, struct gsp_fw **out);
/* Read lane @lane's next command message and serve it as the lane's thread does:
 * reassembly, validation against the RPC table, the handler, the reply written to the
 * status queue (the caller drains it: a reply waits for room). Returns the read's
 * enum gsp_rx (rm/gsp/gsp.h), or -EINVAL for no such lane. */
int gsp_fw_step(struct gsp_fw *s, unsigned int lane);
/* Unmap and free what gsp_fw_open() made. NULL is a no-op. */
void gsp_fw_close(struct gsp_fw *s);

#endif

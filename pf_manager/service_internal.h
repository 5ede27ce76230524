/* SPDX-License-Identifier: MIT */
/* The service plane's internals that the unit tests reach: the CPU priority by share of a
 * VF's service thread (service.c). */
#ifndef PF_SERVICE_INTERNAL_H
#define PF_SERVICE_INTERNAL_H

#include <stdint.h>

#define PF_SVC_SHARE_LIGHT	750	/* per mille of a fair share: at most this is "light" */
#define PF_SVC_NICE_BUSY	19	/* the nice of a thread whose VF is not light */

/* The nice for a VF's service thread that served @served of @total requests, served to
 * @active VFs, in the last window: 0 if that is at most PF_SVC_SHARE_LIGHT of a fair share
 * (total / active) or fewer than two VFs were served, PF_SVC_NICE_BUSY otherwise. */
int pf_svc_share_nice(uint64_t served, uint64_t total, uint32_t active);

#endif

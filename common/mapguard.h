/* SPDX-License-Identifier: MIT */
/* common/mapguard.h - shared file mappings that survive their file being shrunk.
 *
 * A VF's BAR object is a file the daemon maps and its guest holds open: the guest can
 * ftruncate() it, and the daemon's next access past the new end raises SIGBUS, which would
 * take the daemon down with every tenant. A SIGBUS inside a guarded mapping grows the file
 * back to the size it was guarded with (the lost pages read as zeros), counts a hit for the
 * mapping's tag and writes the notify eventfd; after CMN_MAPGUARD_REPAIRS repairs of one
 * mapping a faulting page becomes a private zero page instead, so that every access
 * completes. The owner of the tag then takes the object out of service. Any other SIGBUS
 * ends the process as before. */
#ifndef VGPU_COMMON_MAPGUARD_H
#define VGPU_COMMON_MAPGUARD_H

#include <stddef.h>
#include <stdint.h>

#define CMN_MAPGUARD_SLOTS	1024u	/* guarded mappings per process */
#define CMN_MAPGUARD_TAGS	256u	/* hit counters (a VF number, say) */
#define CMN_MAPGUARD_REPAIRS	64u	/* file repairs per mapping before zero pages */

/* Install the SIGBUS handler unless it is the one in place (what was there before it
 * handles any other SIGBUS) and set @notify_fd, an eventfd written on every hit (-1: none).
 * 0 or -errno. */
int cmn_mapguard_init(int notify_fd);
/* Guard [@addr, +@len), a MAP_SHARED mapping of @fd, whose file is @file_size bytes; hits
 * count for @tag. The fd is duplicated. A slot id (>= 0), -ENOSPC or -EINVAL. */
int cmn_mapguard_add(void *addr, size_t len, int fd, uint64_t file_size, unsigned int tag);
/* Stop guarding slot @id (< 0: nothing), before its mapping goes. */
void cmn_mapguard_del(int id);
/* Hits counted for @tag since the last call, which clears them. */
uint64_t cmn_mapguard_take(unsigned int tag);

#endif

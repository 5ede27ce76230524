/* SPDX-License-Identifier: MIT */
/* common/version.h - the package version every program reports: debian/changelog's, which
 * the Makefile passes as VGPU_VERSION; the fallback is for a compile outside the Makefile. */
#ifndef VGPU_COMMON_VERSION_H
#define VGPU_COMMON_VERSION_H

#ifndef VGPU_VERSION
#define VGPU_VERSION	"0"
#endif

#endif

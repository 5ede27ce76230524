/* SPDX-License-Identifier: MIT */
/* The cases of the scenario suites (test_hmm_mirror, test_hmm_migrate; doc/scenarios.md
 * HMM-nn): each names its scenario, its test function and the CPU-fault backend it runs on
 * ([T] uffd thread, [S] uffd SIGBUS, [P] mprotect). */
#ifndef VGPU_TESTS_HMM_SCENARIO_TEST_H
#define VGPU_TESTS_HMM_SCENARIO_TEST_H

#include "tdev.h"

/* A case's state: what varies between the rows of one test function. */
struct mcase {
	const char *name;
	enum hmm_backend backend;
	uint64_t granule;		/* CPU fault granule (0: 4 KiB) */
	bool thp;
	size_t offset;			/* partial unmap / remap: offset in quarters */
};

#define T	HMM_BACKEND_UFFD_THREAD
#define S	HMM_BACKEND_UFFD_SIGBUS
#define P	HMM_BACKEND_MPROTECT
#define CASE(fn, nm, be, ...) \
	{ "HMM-" nm " " #fn " [" #be "]", fn, NULL, NULL, \
	  &(struct mcase){ .name = nm, .backend = be, __VA_ARGS__ } }
/* The same case on both userfaultfd backends, thread first (and on mprotect last). */
#define CASE_TS(fn, nm, ...)	CASE(fn, nm, T, __VA_ARGS__), CASE(fn, nm, S, __VA_ARGS__)
#define CASE_TSP(fn, nm, ...)	CASE_TS(fn, nm, __VA_ARGS__), CASE(fn, nm, P, __VA_ARGS__)

#endif

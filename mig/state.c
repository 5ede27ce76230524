// SPDX-License-Identifier: MIT
/* vfio migration v2's state machine as a table of legal arcs (the kernel's
 * vfio_mig_get_next_state without the P2P states): a request for a state more than one arc
 * away walks the shortest path, so a caller never takes an arc the table lacks. */
#include <errno.h>
#include <string.h>

#include "common/compiler.h"
#include "mig/mig.h"

static const char *const state_names[MIG_NR_STATES] = {
	[MIG_S_RUNNING] = "running", [MIG_S_PRE_COPY] = "pre_copy",
	[MIG_S_STOP_COPY] = "stop_copy", [MIG_S_STOPPED] = "stopped",
	[MIG_S_RESUMING] = "resuming", [MIG_S_ERROR] = "error",
};

/* arcs[from] has bit (1 << to) for every legal single arc. ERROR has none: only a reset
 * leaves it. PRE_COPY -> RUNNING is the cancel of a live migration. */
static const unsigned int arcs[MIG_NR_STATES] = {
	[MIG_S_RUNNING] = 1u << MIG_S_STOPPED | 1u << MIG_S_PRE_COPY,
	[MIG_S_PRE_COPY] = 1u << MIG_S_RUNNING | 1u << MIG_S_STOP_COPY,
	[MIG_S_STOP_COPY] = 1u << MIG_S_STOPPED,
	[MIG_S_STOPPED] = 1u << MIG_S_RUNNING | 1u << MIG_S_STOP_COPY | 1u << MIG_S_RESUMING,
	[MIG_S_RESUMING] = 1u << MIG_S_STOPPED,
	[MIG_S_ERROR] = 0,
};

static bool state_ok(enum mig_state s)
{
	return (unsigned int)s < MIG_NR_STATES;
}

const char *mig_state_name(enum mig_state s)
{
	return state_ok(s) ? state_names[s] : "invalid";
}

int mig_state_parse(const char *name, enum mig_state *out)
{
	for (unsigned int i = 0; i < MIG_NR_STATES; i++) {
		if (!strcmp(name, state_names[i])) {
			*out = (enum mig_state)i;
			return 0;
		}
	}
	return -EINVAL;
}

bool mig_state_arc_ok(enum mig_state from, enum mig_state to)
{
	return state_ok(from) && state_ok(to) && (arcs[from] >> to & 1);
}

int mig_state_next_hop(enum mig_state from, enum mig_state to, struct cmn_fail *f)
{
	enum mig_state prev[MIG_NR_STATES], queue[MIG_NR_STATES];
	unsigned int seen = 0, head = 0, tail = 0;

	if (!state_ok(from) || !state_ok(to))
		return cmn_fail(f, -EINVAL, "migration state %d or %d is not a state", (int)from, (int)to);
	if (from == to)
		return (int)from;
	/* Breadth-first over six states: the first time @to is reached is a shortest path. */
	queue[tail++] = from;
	seen |= 1u << from;
	while (head < tail) {
		enum mig_state s = queue[head++];

		for (unsigned int n = 0; n < MIG_NR_STATES; n++) {
			if (!(arcs[s] >> n & 1) || (seen >> n & 1))
				continue;
			/* As in vfio: PRE_COPY is entered only when asked for, never on the way. */
			if (n == MIG_S_PRE_COPY && to != MIG_S_PRE_COPY)
				continue;
			seen |= 1u << n;
			prev[n] = s;
			queue[tail++] = (enum mig_state)n;
		}
	}
	if (!(seen >> to & 1))
		return cmn_fail(f, -EINVAL, "no migration arc leads from %s to %s%s",
				state_names[from], state_names[to],
				from == MIG_S_ERROR ? " (only a reset leaves error)" : "");
	while (prev[to] != from)
		to = prev[to];
	return (int)to;
}

void mig_sm_init(struct mig_sm *m, enum mig_state s)
{
	m->state = state_ok(s) ? s : MIG_S_ERROR;
	m->arcs = 0;
}

int mig_sm_set(struct mig_sm *m, enum mig_state to, struct cmn_fail *f)
{
	int next = mig_state_next_hop(m->state, to, f);

	if (next < 0)
		return next;
	while (m->state != to) {
		m->state = (enum mig_state)next;
		m->arcs++;
		next = mig_state_next_hop(m->state, to, NULL);
	}
	return 0;
}

void mig_sm_fail(struct mig_sm *m)
{
	m->state = MIG_S_ERROR;
}

void mig_sm_reset(struct mig_sm *m)
{
	m->state = MIG_S_RUNNING;
	m->arcs++;
}

// SPDX-License-Identifier: MIT
/* The daemon: lifetime, the poll loop, signals, systemd readiness and journal logging.
 * The loop thread serves the control socket, the endpoints and interrupts; each VF's
 * mailbox has its own service thread (service.c), the device model's engines and the RM's
 * GSP client theirs. doc/pf_manager.md draws them. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <systemd/sd-journal.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/mapguard.h"
#include "pf_manager/migrate_internal.h"

#define PF_POLL_MS	100	/* the control socket's sweep (negotiation deadlines) */
#define PF_MAX_POLL	(4 + PF_MAX_CLIENTS + PF_MAX_VFS * PF_EP_MAX_POLLFDS)

/* ---- systemd: readiness (its datagram), the journal (libsystemd) ------------------------- */

static int sd_send(const char *env, const char *msg, size_t len)
{
	const char *path = getenv(env);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t sl;
	ssize_t n;
	int fd;

	if (!path || (path[0] != '/' && path[0] != '@') || strlen(path) >= sizeof(sa.sun_path))
		return -ENOENT;
	strcpy(sa.sun_path, path);
	if (path[0] == '@')
		sa.sun_path[0] = 0;	/* abstract namespace */
	sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	n = sendto(fd, msg, len, MSG_NOSIGNAL, (struct sockaddr *)&sa, sl);
	close(fd);
	return n == (ssize_t)len ? 0 : -EIO;
}

static void sd_notify_str(const char *msg)
{
	sd_send("NOTIFY_SOCKET", msg, strlen(msg));
}

/* One journal entry per record through libsystemd: sd_journal_sendv sends a MESSAGE with
 * newlines in the native protocol's length-prefixed form, so the entry stays whole.
 * VGPU_VF and VGPU_UUID come from the record's fields (`journalctl VGPU_VF=3` finds one
 * VF's story); if the journal cannot be reached, stderr with <N> priority prefixes. */
static void journal_sink(const struct cmn_log_rec *r, void *ctx)
{
	static const int prio[] = { 3, 4, 6, 7 };
	char p[16], vf[24], uuid[64], *msg = NULL;
	struct iovec iov[5];
	int n = 0;

	(void)ctx;
	if (asprintf(&msg, "MESSAGE=%s", r->msg) < 0)
		msg = NULL;
	snprintf(p, sizeof(p), "PRIORITY=%d", prio[r->level]);
	iov[n++] = (struct iovec){ .iov_base = "SYSLOG_IDENTIFIER=vgpud", .iov_len = 23 };
	iov[n++] = (struct iovec){ .iov_base = p, .iov_len = strlen(p) };
	if (msg)
		iov[n++] = (struct iovec){ .iov_base = msg, .iov_len = strlen(msg) };
	if (r->vf) {
		snprintf(vf, sizeof(vf), "VGPU_VF=%u", r->vf);
		iov[n++] = (struct iovec){ .iov_base = vf, .iov_len = strlen(vf) };
	}
	if (r->uuid) {
		snprintf(uuid, sizeof(uuid), "VGPU_UUID=%s", r->uuid);
		iov[n++] = (struct iovec){ .iov_base = uuid, .iov_len = strlen(uuid) };
	}
	if (!msg || sd_journal_sendv(iov, n) < 0)
		fprintf(stderr, "<%d>%s\n", prio[r->level], r->msg);
	free(msg);
}

static void pf_log_setup(void)
{
	/* Under systemd (JOURNAL_STREAM set) log natively with fields; elsewhere the plain
	 * stderr logger stays. */
	if (getenv("JOURNAL_STREAM"))
		cmn_log_set_rec_sink(journal_sink, NULL);
}

/* ---- lifetime ----------------------------------------------------------------------------- */

static void signals_set(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGHUP);
}

/* Block the shutdown signals before the device starts its engine threads: they inherit
 * the mask, so the signals can only reach the signalfd. */
static int signals_block(void)
{
	sigset_t set;

	signals_set(&set);
	signal(SIGPIPE, SIG_IGN);
	return pthread_sigmask(SIG_BLOCK, &set, NULL) ? -EINVAL : 0;
}

/* The eventfd a guarded BAR mapping's fault wakes (common/mapguard.h); installed before
 * any slice maps its object. */
static int guard_open(struct pf_daemon *d)
{
	d->bus_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	return d->bus_fd < 0 ? -errno : cmn_mapguard_init(d->bus_fd);
}

static void guard_close(struct pf_daemon *d)
{
	if (d->bus_fd < 0)
		return;
	cmn_mapguard_init(-1);
	close(d->bus_fd);
	d->bus_fd = -1;
}

static int signals_open(struct pf_daemon *d)
{
	sigset_t set;

	signals_set(&set);
	d->sig_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	return d->sig_fd < 0 ? -errno : 0;
}

static int admin_group_resolve(struct pf_daemon *d)
{
	struct group *g;

	if (!d->cfg.admin_group[0])
		return 0;
	g = getgrnam(d->cfg.admin_group);
	if (!g) {
		cmn_err("admin group %s does not exist", d->cfg.admin_group);
		return -ENOENT;
	}
	d->admin_gid = g->gr_gid;
	d->have_admin_gid = true;
	return 0;
}

/* ---- one daemon per directory ------------------------------------------------------------ */

/* vgpud opens its files in @dir (@what: "state" or "runtime") by name as they are: only a
 * directory that no one else can write is safe for that, one of its own (euid) that is
 * neither group- nor world-writable. -EPERM, naming the directory, owner and mode,
 * otherwise. */
static int dir_check(const char *dir, const char *what)
{
	struct stat sb;
	int r;

	if (stat(dir, &sb)) {
		r = -errno;
		cmn_err("cannot examine the %s directory %s: %s", what, dir, cmn_strerror(r));
		return r;
	}
	if (!S_ISDIR(sb.st_mode)) {
		cmn_err("the %s directory %s is %s; not starting", what, dir,
			pf_file_kind(sb.st_mode));
		return -ENOTDIR;
	}
	if (sb.st_uid == geteuid() && !(sb.st_mode & (S_IWGRP | S_IWOTH)))
		return 0;
	cmn_err("the %s directory %s is owned by uid %u with mode %04o: vgpud (uid %u) opens "
		"its files there by name and needs it its own and writable by no one else; not "
		"starting (chown it to uid %u, chmod go-w)", what, dir, (unsigned int)sb.st_uid,
		(unsigned int)(sb.st_mode & 07777), (unsigned int)geteuid(),
		(unsigned int)geteuid());
	return -EPERM;
}

/* Take @dir's lock file for the daemon's life. Two daemons on one state dir would adopt the
 * same VRAM objects and overwrite each other's journal, two on one runtime dir unlink each
 * other's socket. An OFD lock goes with the descriptor, which the kernel closes however the
 * process dies, so a leftover file never blocks a restart; the pid in the file is only
 * for the next one's message. @what names the directory in it. */
static int dir_lock(const char *dir, const char *what, int *out)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	char path[PF_PATH_MAX + 16], pid[24];
	ssize_t n;
	int fd, r;

	snprintf(path, sizeof(path), "%s/vgpud.lock", dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0) {
		r = -errno;
		cmn_err("cannot open %s: %s", path, cmn_strerror(r));
		return r;
	}
	if (fcntl(fd, F_OFD_SETLK, &fl)) {
		r = -errno;
		n = pread(fd, pid, sizeof(pid) - 1, 0);
		pid[n > 0 ? n : 0] = 0;
		pid[strcspn(pid, "\n")] = 0;
		if (r == -EAGAIN || r == -EACCES)
			cmn_err("another vgpud (pid %s) serves the %s directory %s; not starting",
				pid[0] ? pid : "unknown", what, dir);
		else
			cmn_err("cannot lock %s: %s", path, cmn_strerror(r));
		close(fd);
		return r == -EAGAIN || r == -EACCES ? -EBUSY : r;
	}
	if (ftruncate(fd, 0) || dprintf(fd, "%d\n", (int)getpid()) < 0)
		cmn_warn("cannot write the pid into %s", path);
	*out = fd;
	return 0;
}

/* Lock the state dir, and the runtime dir unless it is the same directory. */
static int dirs_lock(struct pf_daemon *d)
{
	char a[PATH_MAX], b[PATH_MAX];
	int r;

	r = dir_lock(d->cfg.state_dir, "state", &d->lock_fd[0]);
	if (r)
		return r;
	r = pf_mkdir_p(d->cfg.runtime_dir, 0755);
	if (r) {
		cmn_err("cannot create runtime dir %s: %s", d->cfg.runtime_dir, cmn_strerror(r));
		return r;
	}
	r = dir_check(d->cfg.runtime_dir, "runtime");
	if (r)
		return r;
	if (realpath(d->cfg.state_dir, a) && realpath(d->cfg.runtime_dir, b) && !strcmp(a, b))
		return 0;
	return dir_lock(d->cfg.runtime_dir, "runtime", &d->lock_fd[1]);
}

static void dirs_unlock(struct pf_daemon *d)
{
	for (unsigned int i = 0; i < 2; i++) {
		if (d->lock_fd[i] >= 0)
			close(d->lock_fd[i]);
		d->lock_fd[i] = -1;
	}
}

int pf_daemon_create(const struct pf_config *cfg, struct pf_daemon **out)
{
	struct pf_daemon *d = calloc(1, sizeof(*d));
	char err[256];
	int r;

	if (!d)
		return -ENOMEM;
	d->cfg = *cfg;
	d->ctl_fd = d->sig_fd = d->bus_fd = d->lock_fd[0] = d->lock_fd[1] = -1;
	d->started_ns = cmn_now_ns();
	pf_log_setup();
	r = pf_config_check(&d->cfg, err, sizeof(err));
	if (r) {
		cmn_err("config: %s", err);
		goto free_d;
	}
	r = admin_group_resolve(d);
	if (!r)
		r = signals_block();
	if (!r)
		r = guard_open(d);
	if (r)
		goto free_d;
	r = pf_mkdir_p(d->cfg.state_dir, 0750);
	if (r) {
		cmn_err("cannot create state dir %s: %s", d->cfg.state_dir, cmn_strerror(r));
		goto free_d;
	}
	r = dir_check(d->cfg.state_dir, "state");
	if (!r)
		r = dirs_lock(d);
	if (r)
		goto free_d;
	r = pf_device_init(d);
	if (r)
		goto free_d;
	d->num_vfs = d->cfg.num_vfs;
	r = pf_state_load(d);
	if (r)
		goto fini_device;
	r = signals_open(d);
	if (r)
		goto destroy;
	/* The loader finished committed resets and rewrote definitions: a journal that
	 * still holds them pending has the next start after a crash run them again. Written
	 * before the socket listens, so that a client that can connect finds it done. */
	r = pf_state_save_journal(d);
	if (r)
		pf_state_behind(d, r, "the journal still holds the state this start found (with "
				"any reset it finished still pending): if vgpud ends before it "
				"writes the journal again (it does when it stops), its next start "
				"runs those resets again");
	r = pf_control_open(d);
	if (r) {
		cmn_err("cannot listen on %s/control.sock: %s", d->cfg.runtime_dir, cmn_strerror(r));
		goto destroy;
	}
	pf_autostart(d);
	*out = d;
	return 0;
destroy:
	pf_daemon_destroy(d);
	return r;
fini_device:
	pf_device_fini(d);
free_d:
	guard_close(d);
	dirs_unlock(d);
	free(d);
	return r;
}

void pf_daemon_stop(struct pf_daemon *d)
{
	d->stopping = 1;
}

void pf_daemon_destroy(struct pf_daemon *d)
{
	if (!d)
		return;
	sd_notify_str("STOPPING=1");
	pf_live_fini(d);	/* sources resume, destinations let go of what they loaded */
	pf_control_close(d);
	/* Journal first (each running slice's VF, partition and quota), then let go of the
	 * objects without scrubbing them: the next daemon adopts them. */
	if (d->pma)
		pf_state_save_journal(d);
	for (unsigned int vf = 1; vf <= PF_MAX_VFS; vf++)
		if (d->vfs[vf])
			pf_slice_detach(d, d->vfs[vf]);
	pf_device_fini(d);
	for (unsigned int i = 0; i < d->nr_slices; i++)
		pf_slice_free(d->slices[i]);
	if (d->sig_fd >= 0)
		close(d->sig_fd);
	guard_close(d);
	dirs_unlock(d);		/* last: the next daemon may take the dirs now */
	free(d);
}

/* ---- the loop ------------------------------------------------------------------------------ */

/* What each pollfd belongs to. */
struct pf_pollref {
	enum { REF_CTL, REF_SIG, REF_BUS, REF_CLIENT, REF_EP, REF_MIG } kind;
	unsigned int idx;		/* client slot or VF number */
	int first, count;		/* REF_EP: its range in the pollfd array */
};

static int build_poll(struct pf_daemon *d, struct pollfd *p, struct pf_pollref *ref)
{
	int n = 0;

	p[n] = (struct pollfd){ .fd = d->ctl_fd, .events = POLLIN };
	ref[n++] = (struct pf_pollref){ .kind = REF_CTL };
	p[n] = (struct pollfd){ .fd = d->sig_fd, .events = POLLIN };
	ref[n++] = (struct pf_pollref){ .kind = REF_SIG };
	p[n] = (struct pollfd){ .fd = d->bus_fd, .events = POLLIN };
	ref[n++] = (struct pf_pollref){ .kind = REF_BUS };
	if (pf_live_pollfd(d) >= 0) {
		p[n] = (struct pollfd){ .fd = pf_live_pollfd(d), .events = POLLIN };
		ref[n++] = (struct pf_pollref){ .kind = REF_MIG };
	}
	for (unsigned int i = 0; i < PF_MAX_CLIENTS; i++) {
		struct pf_client *c = d->clients[i];

		if (!c)
			continue;
		p[n] = (struct pollfd){ .fd = c->fd, .events = POLLIN | (c->out_len ? POLLOUT : 0) };
		ref[n++] = (struct pf_pollref){ .kind = REF_CLIENT, .idx = i };
	}
	for (unsigned int vf = 1; vf <= PF_MAX_VFS; vf++) {
		int k;

		if (!d->vfs[vf])
			continue;
		k = pf_endpoint_pollfds(d->vfs[vf], p + n, PF_MAX_POLL - n);
		for (int j = 0; j < k; j++)
			ref[n + j] = (struct pf_pollref){ .kind = REF_EP, .idx = vf, .first = n,
							  .count = k };
		n += k;
	}
	return n;
}

static void handle_signal(struct pf_daemon *d)
{
	struct signalfd_siginfo si;

	while (read(d->sig_fd, &si, sizeof(si)) == sizeof(si)) {
		cmn_info("signal %u: shutting down", si.ssi_signo);
		d->stopping = 1;
	}
}

static void dispatch(struct pf_daemon *d, struct pollfd *p, struct pf_pollref *ref, int n)
{
	/* Endpoints before clients: a command may stop a slice and close its fds. */
	for (int i = 0; i < n; i++) {
		if (ref[i].kind != REF_EP || i != ref[i].first)
			continue;
		struct pf_slice *s = d->vfs[ref[i].idx];

		if (s)
			pf_endpoint_handle(d, s, p + i, ref[i].count);
	}
	for (int i = 0; i < n; i++) {
		if (!p[i].revents)
			continue;
		if (ref[i].kind == REF_CLIENT && d->clients[ref[i].idx])
			pf_client_io(d, ref[i].idx, p[i].revents);
		else if (ref[i].kind == REF_SIG)
			handle_signal(d);
		else if (ref[i].kind == REF_BUS)
			pf_slice_bar_faults(d);
		else if (ref[i].kind == REF_MIG)
			pf_live_handle(d);
	}
	if (p[0].revents & POLLIN)
		pf_control_accept(d);
}

/* GSP restarts are noticed on an RM thread; report them from here. */
static void device_reset_events(struct pf_daemon *d)
{
	uint64_t n = atomic_load((_Atomic uint64_t *)&d->device_resets);

	if (n == d->device_resets_seen)
		return;
	d->device_resets_seen = n;
	json_object *o = json_object_new_object();

	json_object_object_add(o, "count", json_object_new_uint64(n));
	pf_event(d, "DEVICE_RESET", o);
}

/* The poll set of one loop iteration, rebuilt each time; on the heap because it is large
 * (every client and every VF's endpoint fds), and owned by the running loop. */
struct pf_poll_set {
	struct pollfd p[PF_MAX_POLL];
	struct pf_pollref ref[PF_MAX_POLL];
};

int pf_daemon_run(struct pf_daemon *d, void (*ready_fn)(void))
{
	struct pf_poll_set *ps = calloc(1, sizeof(*ps));
	char status[PF_PATH_MAX + 64];
	int ret = 0;

	if (!ps)
		return -ENOMEM;

	snprintf(status, sizeof(status), "READY=1\nSTATUS=serving %s/control.sock",
		 d->cfg.runtime_dir);
	sd_notify_str(status);
	if (ready_fn)
		ready_fn();
	cmn_info("vgpud ready: %s, %llu MiB VRAM, %u of %u VFs enabled", d->cfg.model,
		  (unsigned long long)(d->cfg.vram_size >> 20), d->num_vfs, d->cfg.max_vfs);
	while (!d->stopping) {
		int n = build_poll(d, ps->p, ps->ref);
		/* A gone guest's objects are freed one batch per iteration, between the
		 * other work: only the batch, never the whole teardown, delays anyone. */
		bool teardown = pf_rm_teardown_step(d);
		int r = poll(ps->p, (nfds_t)n,
			     teardown ? 0 : pf_reset_poll_ms(d, cmn_now_ns(), PF_POLL_MS));

		if (r < 0 && errno != EINTR) {
			ret = -errno;
			break;
		}
		/* The mailbox counters as of now, for the commands about to run. */
		for (unsigned int vf = 1; vf <= PF_MAX_VFS; vf++)
			if (d->vfs[vf])
				pf_svc_sync(d->vfs[vf]);
		if (r > 0)
			dispatch(d, ps->p, ps->ref, n);
		/* After the dispatch: a guest's acknowledgement rang its event vector. */
		pf_reset_tick(d, cmn_now_ns());
		pf_slice_stop_broken(d);
		pf_control_sweep(d, cmn_now_ns());
		device_reset_events(d);
	}
	free(ps);
	return ret;
}

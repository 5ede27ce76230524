# SPDX-License-Identifier: MIT
# vgpu - top-level build.
MAKEFLAGS += --jobs=$(shell nproc) --output-sync=target
#
# Modules are discovered: every folder with a module.mk (common/, pma/, rm/gsp/ ...) adds
#   MODULES += <name>, <name>_DIR, <name>_DEPS (modules it links, nearest first), <name>_LDLIBS,
#   and optionally <name>_TSAN_TESTS (test names also run under ThreadSanitizer) and
#   <name>_TEST_HOOKS := 1 (below) and <name>_TEST_DEPS (modules only its tests link, each
#   with its own deps: what a test builds its fixture from that the module does not use).
# A module's <dir>/*.c build lib<name>.a; <dir>/cmd/<prog>.c build bin/<prog>.
# Test hooks: a module with <name>_TEST_HOOKS is compiled a second time with -DVGPU_TEST_HOOKS
#   (objects under obj-th/, lib<name>-th.a, programs bin/<prog>-test). Unit tests and
#   benchmarks link the -th libraries; programs (the product) never do, so code under
#   VGPU_TEST_HOOKS (fault injection, test-only RPCs) exists only in test builds.
# tests/unit/<name>/test_*.c each build one cmocka binary linked with the module and its deps.
# tests/bench/<bench>/ (with bench.mk: BENCHES += <bench>, <bench>_DEPS) build bin/<bench>.
# Everything is built per variant: rel (-O2 -g), asan (ASan+UBSan), tsan; the fuzz variant
# (clang, libFuzzer) builds only what tests/fuzz/fuzz.mk's harnesses link.

CC      ?= gcc
BUILD   ?= build
# Quiet by default: one line per target ("  CC      pma/pma.c", "  LD      rel/bin/vgpud");
# V=1 shows the commands instead. $(call say,TAG,WHAT) starts a recipe line.
Q       := $(if $(V),,@)
say      = $(if $(V),,@printf '  %-7s %s\n' '$(1)' '$(2)';)

# The release version: the first entry of debian/changelog (the package has the same).
VERSION := $(shell sed -n '1s/^[^(]*(\([^)]*\)).*/\1/p' debian/changelog 2>/dev/null)

# Install layout (GNU names; `make install PREFIX=/usr sysconfdir=/etc` for a system one).
PREFIX         ?= /usr/local
bindir         ?= $(PREFIX)/bin
sbindir        ?= $(PREFIX)/sbin
libexecdir     ?= $(PREFIX)/libexec
sysconfdir     ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
datadir        ?= $(PREFIX)/share
mandir         ?= $(datadir)/man
bashcompdir    ?= $(datadir)/bash-completion/completions
systemdunitdir ?= $(PREFIX)/lib/systemd/system
sysusersdir    ?= $(PREFIX)/lib/sysusers.d
tmpfilesdir    ?= $(PREFIX)/lib/tmpfiles.d
# vgpud looks for vgpu-gsp here (compiled in; $$VGPU_GSP overrides it).
gspdir         := $(libexecdir)/vgpu

# x86-64-v2 (2009+: popcnt, sse4.2): bit counting is on the allocator hot path.
ARCH_CFLAGS   := $(if $(filter x86_64,$(shell uname -m)),-march=x86-64-v2)
CFLAGS_COMMON := -std=gnu11 -Wall -Wextra -Werror -g -pthread -D_GNU_SOURCE $(ARCH_CFLAGS) \
		 -Iinclude -I. -MMD -MP $(if $(VERSION),-DVGPU_VERSION='"$(VERSION)"')
# A distribution's hardening flags (debian/rules passes dpkg-buildflags' here): rel only.
CFLAGS_rel    := -O2 $(DISTRO_CFLAGS)
CFLAGS_asan   := -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -DCMN_LOCKDEP \
		 -fno-sanitize-recover=all
CFLAGS_tsan   := -O1 -fsanitize=thread -DCMN_LOCKDEP
LDFLAGS_rel   := $(DISTRO_LDFLAGS)
LDFLAGS_asan  := -fsanitize=address,undefined
LDFLAGS_tsan  := -fsanitize=thread
CC_fuzz       := clang
CFLAGS_fuzz   := -O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined \
		 -fno-sanitize-recover=all
LDFLAGS_fuzz  := -fsanitize=fuzzer,address,undefined
VARIANTS      := rel asan tsan fuzz

# module.mk files may add rules (ordering prerequisites); `make` alone still builds all.
.DEFAULT_GOAL := all

MODULES :=
BENCHES :=
include $(sort $(wildcard */module.mk */*/module.mk */*/*/module.mk))
include $(sort $(wildcard tests/bench/*/bench.mk))
FUZZERS :=
include tests/fuzz/fuzz.mk

.PHONY: all check bench demo clean
all: rel

# ---- per-variant rules ---------------------------------------------------------------
# $(1) = variant
define variant_rules
$(BUILD)/$(1)/obj/%.o: %.c Makefile
	@mkdir -p $$(dir $$@)
	$(call say,CC,$(1)/$$<)$$(or $$(CC_$(1)),$$(CC)) $$(CFLAGS_COMMON) $$(CFLAGS_$(1)) $$(EXTRA_CFLAGS) -c $$< -o $$@
$(BUILD)/$(1)/obj-th/%.o: %.c Makefile
	@mkdir -p $$(dir $$@)
	$(call say,CC-TH,$(1)/$$<)$$(or $$(CC_$(1)),$$(CC)) $$(CFLAGS_COMMON) $$(CFLAGS_$(1)) $$(EXTRA_CFLAGS) -DVGPU_TEST_HOOKS -c $$< -o $$@
endef
$(foreach v,$(VARIANTS),$(eval $(call variant_rules,$(v))))

libpath = $(BUILD)/$(1)/lib/lib$(2).a
modlibs = $(foreach m,$(2) $($(2)_DEPS),$(call libpath,$(1),$(m)))
modldlibs = $(sort $(foreach m,$(1) $($(1)_DEPS),$($(m)_LDLIBS)))
# What tests and benchmarks link: the -th library of a module with test hooks.
thlib = $(if $($(2)_TEST_HOOKS),$(BUILD)/$(1)/lib/lib$(2)-th.a,$(call libpath,$(1),$(2)))
modlibs_th = $(foreach m,$(2) $($(2)_DEPS),$(call thlib,$(1),$(m)))
# A unit test's libraries: the module, each test dep with its deps, then the module's deps.
testmods = $(1) $(foreach t,$($(1)_TEST_DEPS),$(t) $($(t)_DEPS)) $($(1)_DEPS)
testlibs = $(foreach m,$(call testmods,$(2)),$(call thlib,$(1),$(m)))
testldlibs = $(sort $(foreach m,$(call testmods,$(1)),$($(m)_LDLIBS)))

# $(1) = variant, $(2) = module
define module_rules
$(2)_SRCS := $(wildcard $($(2)_DIR)/*.c)
$(2)_OBJS_$(1) := $$(patsubst %.c,$(BUILD)/$(1)/obj/%.o,$$($(2)_SRCS))
$(call libpath,$(1),$(2)): $$($(2)_OBJS_$(1))
	@mkdir -p $$(dir $$@)
	$(call say,AR,$(1)/lib/lib$(2).a)rm -f $$@ && ar rcs $$@ $$^
-include $$($(2)_OBJS_$(1):.o=.d)
$(if $($(2)_TEST_HOOKS),
$(2)_THOBJS_$(1) := $$(patsubst %.c,$(BUILD)/$(1)/obj-th/%.o,$$($(2)_SRCS))
$(BUILD)/$(1)/lib/lib$(2)-th.a: $$($(2)_THOBJS_$(1))
	@mkdir -p $$(dir $$@)
	$(call say,AR,$(1)/lib/lib$(2)-th.a)rm -f $$@ && ar rcs $$@ $$^
-include $$($(2)_THOBJS_$(1):.o=.d)
$(foreach p,$(patsubst $($(2)_DIR)/cmd/%.c,%,$(wildcard $($(2)_DIR)/cmd/*.c)),
$(BUILD)/$(1)/bin/$(p)-test: $(BUILD)/$(1)/obj-th/$($(2)_DIR)/cmd/$(p).o $(call modlibs_th,$(1),$(2))
	@mkdir -p $$(dir $$@)
	$(call say,LD,$(1)/bin/$(p)-test)$$(CC) $$(LDFLAGS_$(1)) -pthread -o $$@ $$^ $(call modldlibs,$(2))
-include $(BUILD)/$(1)/obj-th/$($(2)_DIR)/cmd/$(p).d
TH_PROGS_$(1) += $(BUILD)/$(1)/bin/$(p)-test
))

$(2)_PROGS := $(patsubst $($(2)_DIR)/cmd/%.c,%,$(wildcard $($(2)_DIR)/cmd/*.c))
$(foreach p,$(patsubst $($(2)_DIR)/cmd/%.c,%,$(wildcard $($(2)_DIR)/cmd/*.c)),
$(BUILD)/$(1)/bin/$(p): $(BUILD)/$(1)/obj/$($(2)_DIR)/cmd/$(p).o $(call modlibs,$(1),$(2))
	@mkdir -p $$(dir $$@)
	$(call say,LD,$(1)/bin/$(p))$$(CC) $$(LDFLAGS_$(1)) -pthread -o $$@ $$^ $(call modldlibs,$(2))
-include $(BUILD)/$(1)/obj/$($(2)_DIR)/cmd/$(p).d
PROGS_$(1) += $(BUILD)/$(1)/bin/$(p)
)
$(foreach t,$(patsubst tests/unit/$(2)/%.c,%,$(wildcard tests/unit/$(2)/test_*.c)),
$(BUILD)/$(1)/tests/$(2)/$(t): $(BUILD)/$(1)/obj/tests/unit/$(2)/$(t).o $(call testlibs,$(1),$(2))
	@mkdir -p $$(dir $$@)
	$(call say,LD,$(1)/tests/$(2)/$(t))$$(CC) $$(LDFLAGS_$(1)) -pthread -o $$@ $$< $(call testlibs,$(1),$(2)) \
		$(call testldlibs,$(2)) -lcmocka
-include $(BUILD)/$(1)/obj/tests/unit/$(2)/$(t).d
TESTS_$(1) += $(BUILD)/$(1)/tests/$(2)/$(t)
)
endef
$(foreach v,$(VARIANTS),$(foreach m,$(MODULES),$(eval $(call module_rules,$(v),$(m)))))

# $(1) = variant, $(2) = bench
define bench_rules
$(2)_OBJS_$(1) := $(patsubst %.c,$(BUILD)/$(1)/obj/%.o,$(wildcard tests/bench/$(2)/*.c))
$(BUILD)/$(1)/bin/$(2): $$($(2)_OBJS_$(1)) $(foreach m,$($(2)_DEPS),$(call thlib,$(1),$(m)))
	@mkdir -p $$(dir $$@)
	$(call say,LD,$(1)/bin/$(2))$$(CC) $$(LDFLAGS_$(1)) -pthread -o $$@ $$^ $(sort $(foreach m,$($(2)_DEPS),$($(m)_LDLIBS)))
-include $$($(2)_OBJS_$(1):.o=.d)
BENCH_BINS_$(1) += $(BUILD)/$(1)/bin/$(2)
endef
$(foreach b,$(BENCHES),$(eval $(call bench_rules,rel,$(b))))
# The tests and benchmarks start the -test programs (vgpu-gsp-test): built with them.
$(foreach v,$(VARIANTS),$(eval $$(TESTS_$(v)): | $$(TH_PROGS_$(v))))
$(BENCH_BINS_rel): | $(TH_PROGS_rel)

# $(1) = harness name
define fuzz_rules
$(BUILD)/fuzz/bin/fuzz_$(1): $(BUILD)/fuzz/obj/tests/fuzz/fuzz_$(1).o \
		$(foreach m,$(fuzz_$(1)_DEPS),$(call modlibs,fuzz,$(m)))
	@mkdir -p $$(dir $$@)
	$(call say,LD,fuzz/bin/fuzz_$(1))$(CC_fuzz) $(LDFLAGS_fuzz) -pthread -o $$@ $$^ \
		$(sort $(foreach m,$(fuzz_$(1)_DEPS),$(call modldlibs,$(m))))
-include $(BUILD)/fuzz/obj/tests/fuzz/fuzz_$(1).d
FUZZ_BINS += $(BUILD)/fuzz/bin/fuzz_$(1)
endef
$(foreach f,$(FUZZERS),$(eval $(call fuzz_rules,$(f))))

# Extra rules a module keeps beside its module.mk (vf_guest's static test binary).
STATIC_BINS :=
include $(sort $(wildcard */static.mk))

# The shim the durability test preloads to lose what was not fsynced: no sanitizer, so it
# loads in front of any variant's vgpud.
define lostwrites_rule
$(BUILD)/$(1)/lib/libvgpu-lostwrites.so: tests/unit/pf_manager/lostwrites.c
	@mkdir -p $$(dir $$@)
	$(call say,LD,$(1)/lib/libvgpu-lostwrites.so)$(CC) -std=gnu11 -Wall -Wextra -Werror -O2 -fPIC -shared -o $$@ $$< -ldl -pthread
$(BUILD)/$(1)/tests/pf_manager/test_vgpud_durability: | $(BUILD)/$(1)/lib/libvgpu-lostwrites.so
endef
$(foreach v,rel asan tsan,$(eval $(call lostwrites_rule,$(v))))

TSAN_TESTS := $(foreach m,$(MODULES),$(foreach t,$($(m)_TSAN_TESTS),\
	$(if $(wildcard tests/unit/$(m)/$(t).c),$(BUILD)/tsan/tests/$(m)/$(t))))

.PHONY: rel asan tsan
rel:  $(PROGS_rel) $(TH_PROGS_rel) $(TESTS_rel) $(BENCH_BINS_rel) $(STATIC_BINS)
asan: $(PROGS_asan) $(TH_PROGS_asan) $(TESTS_asan)
tsan: $(TSAN_TESTS)

# ---- top-level targets -----------------------------------------------------------------
# What the build and the tests need (doc/dependencies.md says why each is here); what
# `make deb` and tests/tools/clean-machine.sh need besides.
DEB_PACKAGES := build-essential pkg-config libcmocka-dev liburcu-dev libjson-c-dev libinih-dev \
		libxml2-dev libsystemd-dev clang libclang-rt-dev librsvg2-bin \
		valgrind qemu-system-x86 busybox-static cpio xz-utils libelf1 libxml2-utils \
		libvirt-dev libvirt-daemon-system libvirt-daemon-driver-qemu libvirt-clients iproute2
DEB_PACKAGES_PKG := debhelper dpkg-dev fakeroot lintian mmdebstrap
# $(call apt_need,PACKAGES): install the ones dpkg does not know as installed.
apt_need = @missing=$$(for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	else echo "deps: all installed"; fi
.PHONY: deps deps-pkg
deps:
	$(call apt_need,$(DEB_PACKAGES))
deps-pkg:
	$(call apt_need,$(DEB_PACKAGES_PKG))

# ---- install, uninstall, the Debian package ---------------------------------------------
# vgpud finds vgpu-gsp in $(gspdir): the path is compiled into rm_glue.o, which is rebuilt
# when it changes (the stamp's content is the path).
PATHS_STAMP := $(BUILD)/gspdir.stamp
$(shell mkdir -p $(BUILD) && { [ "$$(cat $(PATHS_STAMP) 2>/dev/null)" = '$(gspdir)' ] || \
	echo '$(gspdir)' >$(PATHS_STAMP); })
$(foreach v,$(VARIANTS),$(eval $(BUILD)/$(v)/obj/pf_manager/rm_glue.o: $(PATHS_STAMP)))
$(foreach v,$(VARIANTS),$(eval $(BUILD)/$(v)/obj/pf_manager/rm_glue.o: \
	EXTRA_CFLAGS += -DVGPU_GSP_DIR='"$(gspdir)"'))

# program -> directory it is installed in
INSTALL_PROGS := vgpud:$(sbindir) vgpuctl:$(sbindir) vgpu-vm:$(bindir) vgpu-gsp:$(gspdir)
INSTALL_MAN   := doc/vgpud.8 doc/vgpuctl.8 doc/vgpu-vm.1
INSTALL_UNITS := vgpud.service vgpud@.service
LIBVIRT_HOOK_DIR ?= /etc/libvirt/hooks/qemu.d
SUBST_PATHS = sed -e 's|@SBINDIR@|$(sbindir)|g' -e 's|@SYSCONFDIR@|$(sysconfdir)|g' \
		  -e 's|@GSPDIR@|$(gspdir)|g' -e 's|@VGPU_VM@|$(bindir)/vgpu-vm|g'
progs: $(foreach p,$(INSTALL_PROGS),$(BUILD)/rel/bin/$(firstword $(subst :, ,$(p))))

# The configuration: the live file, and the shipped default it was installed from (recorded
# so that a later install or uninstall tells an unedited file of any version from an edited one).
CONF          = $(DESTDIR)$(sysconfdir)/vgpud/vgpud.conf
CONF_DIST     = $(DESTDIR)$(datadir)/vgpu/vgpud.conf.dist
# True as root without DESTDIR where systemd is PID 1: the units are the machine's own then.
SYSTEMD_LIVE  = [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && [ -d /run/systemd/system ] && \
		command -v systemctl >/dev/null
# The instances of vgpud@.service that systemctl enabled (their symlinks in /etc).
VGPUD_ENABLED = $$(for l in /etc/systemd/system/*.wants/vgpud@*.service; do \
		[ -L "$$l" ] && echo "$${l\#\#*/}"; done | sort -u)

# A live configuration that still is the recorded default of the previous install is replaced
# by this one's; an edited one is kept. As root without DESTDIR the group vgpu (named in the
# configuration) is created the way the package does (systemd-sysusers, else groupadd), and
# systemd reloads the units where it runs.
.PHONY: progs install uninstall deb
install: progs
	$(call say,INSTALL,$(DESTDIR)$(PREFIX))set -e; \
	for pd in $(INSTALL_PROGS); do \
		install -D -m 0755 $(BUILD)/rel/bin/$${pd%%:*} $(DESTDIR)$${pd#*:}/$${pd%%:*}; done; \
	for m in $(INSTALL_MAN); do \
		install -D -m 0644 $$m $(DESTDIR)$(mandir)/man$${m##*.}/$${m##*/}; done; \
	for c in vgpuctl vgpu-vm; do \
		install -D -m 0644 dist/bash-completion/$$c $(DESTDIR)$(bashcompdir)/$$c; done; \
	for u in $(INSTALL_UNITS); do \
		install -d $(DESTDIR)$(systemdunitdir); \
		$(SUBST_PATHS) dist/$$u.in >$(DESTDIR)$(systemdunitdir)/$$u; \
		chmod 0644 $(DESTDIR)$(systemdunitdir)/$$u; done; \
	install -D -m 0644 dist/sysusers.conf $(DESTDIR)$(sysusersdir)/vgpu.conf; \
	install -D -m 0644 dist/tmpfiles.conf $(DESTDIR)$(tmpfilesdir)/vgpu.conf; \
	install -d $(DESTDIR)$(LIBVIRT_HOOK_DIR); \
	$(SUBST_PATHS) vmm_glue/hook/qemu-hook.in >$(DESTDIR)$(LIBVIRT_HOOK_DIR)/vgpu; \
	chmod 0755 $(DESTDIR)$(LIBVIRT_HOOK_DIR)/vgpu; \
	if [ ! -e $(CONF) ] || cmp -s $(CONF) $(CONF_DIST); then \
		install -D -m 0644 dist/vgpud.conf $(CONF); \
	else echo "  kept $(CONF) (changed)"; fi; \
	install -D -m 0644 dist/vgpud.conf $(CONF_DIST); \
	if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && ! getent group vgpu >/dev/null; then \
		systemd-sysusers $(sysusersdir)/vgpu.conf 2>/dev/null || groupadd --system vgpu; fi; \
	if $(SYSTEMD_LIVE); then systemctl daemon-reload || true; fi

# Removes what install put there; the configuration only while it is the recorded default.
# As root without DESTDIR, where systemd runs, the units are stopped and disabled first.
uninstall:
	$(call say,UNINST,$(DESTDIR)$(PREFIX))\
	if $(SYSTEMD_LIVE); then \
		systemctl stop 'vgpud@*.service' || true; \
		systemctl disable --now vgpud.service $(VGPUD_ENABLED) || true; fi; \
	for pd in $(INSTALL_PROGS); do rm -f $(DESTDIR)$${pd#*:}/$${pd%%:*}; done; \
	for m in $(INSTALL_MAN); do rm -f $(DESTDIR)$(mandir)/man$${m##*.}/$${m##*/}; done; \
	rm -f $(DESTDIR)$(bashcompdir)/vgpuctl $(DESTDIR)$(bashcompdir)/vgpu-vm; \
	for u in $(INSTALL_UNITS); do rm -f $(DESTDIR)$(systemdunitdir)/$$u; done; \
	rm -f $(DESTDIR)$(sysusersdir)/vgpu.conf $(DESTDIR)$(tmpfilesdir)/vgpu.conf \
		$(DESTDIR)$(LIBVIRT_HOOK_DIR)/vgpu; \
	if [ -e $(CONF) ] && cmp -s $(CONF) $(CONF_DIST); then \
		rm -f $(CONF); \
	elif [ -e $(CONF) ]; then \
		echo "  kept $(CONF) (changed)"; fi; \
	rm -f $(CONF_DIST); \
	rmdir $(DESTDIR)$(gspdir) $(DESTDIR)$(sysconfdir)/vgpud $(DESTDIR)$(datadir)/vgpu \
		2>/dev/null; \
	if $(SYSTEMD_LIVE); then systemctl daemon-reload || true; fi; true

# vgpu_$(VERSION)_amd64.deb in $(BUILD)/deb/, built by dpkg-buildpackage (debian/) from a
# copy of the files git tracks (as they are in the working tree: `git add` a new file to
# package it; outside a git clone, of every file but the build directories), without
# running the tests (make check does that).
DEB_DIR := $(BUILD)/deb
deb:
	$(call say,DEB,$(DEB_DIR)/vgpu_$(VERSION)_amd64.deb)set -e; \
	rm -rf $(DEB_DIR) && mkdir -p $(DEB_DIR)/vgpu-$(VERSION); \
	{ if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then git ls-files -z; \
	  else find . \( -path './build*' -o -path ./debian/build \) -prune -o -type f -print0; \
	  fi; } | xargs -0 sh -c 'for f; do [ -e "$$f" ] && printf "%s\0" "$$f"; done' sh | \
		xargs -0 cp --parents -t $(DEB_DIR)/vgpu-$(VERSION); \
	cd $(DEB_DIR)/vgpu-$(VERSION) && DEB_BUILD_OPTIONS="nocheck $$DEB_BUILD_OPTIONS" \
		dpkg-buildpackage -b -us -uc $(if $(V),,>../build.log 2>&1 || \
		{ tail -n 40 ../build.log; exit 1; }); \
	ls $(abspath $(DEB_DIR))/vgpu_$(VERSION)_amd64.deb

# VM tier (vmm_glue/vm.mk): VM_SUITES are TAP-speaking programs that boot guests,
# VM_DEPS what they need built first (guest image, static guest binaries).
VM_SUITES :=
VM_DEPS :=
-include vmm_glue/vm.mk

# Every suite plain, then under ASan+UBSan, then the thread-heavy ones under TSan, then
# the VM tier; tests/run-suites prints the one summary line. The hmm suites run a second
# time in each variant with the capabilities of Linux 6.1 (no UFFDIO_MOVE: doc/hmm.md).
check: rel asan tsan fuzz-bins $(VM_DEPS)
	$(Q)FUZZ_BINDIR=$(BUILD)/fuzz/bin FUZZ_SECONDS=10 FUZZ_FINDINGS=$(BUILD)/fuzz/findings \
	tests/run-suites \
		--label tools tests/tools/test_*.sh \
		--label fuzz tests/fuzz/run-fuzz \
		--label rel $(TESTS_rel) \
		--label rel-hmm61 --env VGPU_HMM_CAPS=6.1 $(filter $(BUILD)/rel/tests/hmm/%,$(TESTS_rel)) \
		--label asan $(TESTS_asan) \
		--label asan-hmm61 --env VGPU_HMM_CAPS=6.1 $(filter $(BUILD)/asan/tests/hmm/%,$(TESTS_asan)) \
		--label tsan $(TSAN_TESTS) \
		--label tsan-hmm61 --env VGPU_HMM_CAPS=6.1 $(filter $(BUILD)/tsan/tests/hmm/%,$(TSAN_TESTS)) \
		$(if $(strip $(VM_SUITES)),--label vm $(VM_SUITES))

# Every harness replays its corpus and saved crashes, then fuzzes FUZZ_SECONDS (default 60).
FUZZ_SECONDS ?= 60
.PHONY: fuzz fuzz-bins
fuzz-bins: $(FUZZ_BINS)
fuzz: fuzz-bins
	$(Q)FUZZ_BINDIR=$(BUILD)/fuzz/bin FUZZ_SECONDS=$(FUZZ_SECONDS) \
		FUZZ_FINDINGS=$(BUILD)/fuzz/findings tests/fuzz/run-fuzz

bench: rel
	$(Q)set -e; for b in $(BENCH_BINS_rel); do echo "== $$b"; $$b; done

demo: rel
	$(Q)$(BUILD)/rel/bin/pma_demo
	$(Q)pf_manager/demo.sh $(BUILD)/rel/bin

clean:
	rm -rf $(BUILD)

# SPDX-License-Identifier: MIT
# vmm_glue/vm-libvirt.mk - the libvirt tier of `make vm-check` (included by vmm_glue/vm.mk)
# and `make install-hook`.
#
#   make install-hook   vgpu-vm into $(PREFIX)/bin and the qemu hook into
#                       $(LIBVIRT_HOOK_DIR)/vgpu (restart libvirtd after the first install)
#   make uninstall-hook removes both
#
# The suites (tests/vm/libvirt-*.sh, helpers in tests/vm/libvirt-lib.sh) start virtlogd and
# libvirtd only if they are not running, and stop only what they started.
PREFIX           ?= /usr/local
LIBVIRT_HOOK_DIR ?= /etc/libvirt/hooks/qemu.d

VM_SUITES += tests/vm/libvirt-vfio.sh tests/vm/libvirt-attack.sh tests/vm/libvirt-hook.sh \
	     tests/vm/libvirt-migrate.sh
VM_DEPS   += $(BUILD)/rel/bin/vgpu-vm $(BUILD)/rel/tests/vmm_glue/test_vmm_xml

# Live migration between two libvirt hosts in network namespaces (a -> b -> a with the
# workload running) alone: `make vm-migrate-check`.
.PHONY: vm-migrate-check
vm-migrate-check: $(VM_DEPS)
	$(Q)tests/run-suites --label vm tests/vm/libvirt-migrate.sh

.PHONY: install-hook uninstall-hook
install-hook: $(BUILD)/rel/bin/vgpu-vm
	install -D -m 0755 $(BUILD)/rel/bin/vgpu-vm $(DESTDIR)$(PREFIX)/bin/vgpu-vm
	@mkdir -p $(DESTDIR)$(LIBVIRT_HOOK_DIR)
	sed 's|@VGPU_VM@|$(PREFIX)/bin/vgpu-vm|' vmm_glue/hook/qemu-hook.in \
		>$(DESTDIR)$(LIBVIRT_HOOK_DIR)/.vgpu.tmp
	chmod 0755 $(DESTDIR)$(LIBVIRT_HOOK_DIR)/.vgpu.tmp
	mv -f $(DESTDIR)$(LIBVIRT_HOOK_DIR)/.vgpu.tmp $(DESTDIR)$(LIBVIRT_HOOK_DIR)/vgpu
	@echo "installed $(LIBVIRT_HOOK_DIR)/vgpu; restart libvirtd if it ran without hooks"

uninstall-hook:
	rm -f $(DESTDIR)$(LIBVIRT_HOOK_DIR)/vgpu $(DESTDIR)$(PREFIX)/bin/vgpu-vm

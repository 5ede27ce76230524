# SPDX-License-Identifier: MIT
# vmm_glue/vm.mk - the VM tier: the guest image and `make vm-check` (included by the
# top-level Makefile, which runs $(VM_SUITES) in `make check` after building $(VM_DEPS)).
#
#   make guest-image   build/guest/vmlinux (PVH ELF) + build/guest/initramfs.cpio.gz, from the
#                      Debian kernel package (fetched once into build/guest/, never pinned to an
#                      ABI number) and this build's static vgpu-vf-test; see vmm_glue/guest/README
#   make vm-check      only the VM suites (each prints TAP; tests/run-suites folds them)
#   make vm-bench      tests/bench/vm_launch: launch -> guest suite result, direct QEMU
#                      against libvirt in one run, stage by stage, as JSON
#                      (VM_BENCH_ARGS: e.g. --runs 3 --args --big)
#   make vm-kmod-bench the guest kernel driver's figures (tests/vm/kmod-bench.sh) as JSON
#
# The suites find the binaries and the image through VGPU_BIN and VGPU_GUEST (tests/vm/lib.sh).
# The guest image lives in build/guest/ whatever BUILD is (it is the same for every variant);
# GUEST_DIR puts it elsewhere, e.g. a private build: make BUILD=build/me
# GUEST_DIR=build/me/guest guest-image vm-check (the kernel package is fetched there once).
GUEST_DIR     ?= build/guest
VM_GUEST_BIN  := $(BUILD)/rel/bin/vgpu-vf-test-static
VM_HOST_BINS  := $(BUILD)/rel/bin/vgpud $(BUILD)/rel/bin/vgpuctl $(BUILD)/rel/bin/vgpu-gsp

export VGPU_BIN   := $(abspath $(BUILD)/rel/bin)
export VGPU_GUEST := $(abspath $(GUEST_DIR))

.PHONY: guest-image vm-check
# Always runs the builder: it is incremental itself (and fetches the kernel only once).
guest-image: $(VM_GUEST_BIN)
	$(Q)vmm_glue/guest/mkimage.sh $(GUEST_DIR) $(VM_GUEST_BIN)

VM_SUITES += $(sort $(wildcard tests/vm/qemu-*.sh))
VM_DEPS   += guest-image $(VM_HOST_BINS)

# The libvirt tier appends its own suites and deps.
-include vmm_glue/vm-libvirt.mk

vm-check: $(VM_DEPS)
	$(Q)tests/run-suites --label vm $(VM_SUITES)

.PHONY: vm-bench
vm-bench: $(VM_DEPS)
	$(Q)tests/bench/vm_launch/vm_launch.sh --json $(VM_BENCH_ARGS)

# The guest kernel driver's figures as one JSON object (tests/vm/kmod-bench.sh): mailbox
# round trip by interrupt and by polling, SVM migration GB/s against a guest memcpy,
# submission through libvgpu-vf on the driver and on the polling tier, BAR2 bandwidth
# through the driver's mmap on q35 and on pc (whose BIOS may leave BAR2 uncached).
.PHONY: vm-kmod-bench
vm-kmod-bench: $(VM_DEPS)
	$(Q)tests/vm/kmod-bench.sh

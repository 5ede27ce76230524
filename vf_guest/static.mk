# SPDX-License-Identifier: MIT
# vf_guest/static.mk - a fully static vgpu-vf-test (the test runner, libvft, with the driver,
# libvgpu-vf), the binary that goes into a minimal VM image, and the example programs.
# Included by the top-level Makefile after the module rules; built by `make`.
# glibc's libc.a comes with build-essential; no host code is linked (vft_DEPS holds only
# guest-side libraries).
STATIC_BINS += $(BUILD)/rel/bin/vgpu-vf-test-static
$(BUILD)/rel/bin/vgpu-vf-test-static: $(BUILD)/rel/obj/vf_guest/vft/cmd/vgpu-vf-test.o \
		$(call modlibs,rel,vft)
	@mkdir -p $(dir $@)
	$(Q)$(CC) -static -pthread -o $@ $^ $(call modldlibs,vft)

# The example programs (vf_guest/examples/*.c: programs a tenant would write against the
# public header) become bin/<name> in the rel variant; `make demo` runs vf_work on every slice.
VF_EXAMPLES := $(patsubst vf_guest/examples/%.c,$(BUILD)/rel/bin/%,$(wildcard vf_guest/examples/*.c))
STATIC_BINS += $(VF_EXAMPLES)
$(VF_EXAMPLES): $(BUILD)/rel/bin/%: $(BUILD)/rel/obj/vf_guest/examples/%.o $(call modlibs,rel,vf_guest)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS_rel) -pthread -o $@ $^ $(call modldlibs,vf_guest)
-include $(patsubst $(BUILD)/rel/bin/%,$(BUILD)/rel/obj/vf_guest/examples/%.d,$(VF_EXAMPLES))

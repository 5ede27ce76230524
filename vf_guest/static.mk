# vf_guest/static.mk - a fully static vgpu-vf-test, the binary that goes into a minimal VM
# image. Included by the top-level Makefile after the module rules; built by `make`.
# glibc's libc.a comes with build-essential; no host code is linked (vf_guest_DEPS is empty).
STATIC_BINS += $(BUILD)/rel/bin/vgpu-vf-test-static
$(BUILD)/rel/bin/vgpu-vf-test-static: $(BUILD)/rel/obj/vf_guest/cmd/vgpu-vf-test.o \
		$(call libpath,rel,vf_guest)
	@mkdir -p $(dir $@)
	$(Q)$(CC) -static -pthread -o $@ $^

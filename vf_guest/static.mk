# vf_guest/static.mk - PROPOSED rule for a fully static vgpu-vf-test (the binary that goes into
# a minimal VM image). Not included by the top-level Makefile (it includes */module.mk only);
# the owner of the Makefile may paste it or include it. Tested by hand with exactly:
#
#   make build/rel/obj/vf_guest/cmd/vgpu-vf-test.o build/rel/lib/libvf_guest.a
#   gcc -static -pthread -o build/rel/bin/vgpu-vf-test-static \
#       build/rel/obj/vf_guest/cmd/vgpu-vf-test.o build/rel/lib/libvf_guest.a
#
# (glibc's libc.a and libpthread come with build-essential: no extra Debian package.) The
# result has no host code in it: vf_guest_DEPS is empty.
$(BUILD)/rel/bin/vgpu-vf-test-static: $(BUILD)/rel/obj/vf_guest/cmd/vgpu-vf-test.o \
		$(call libpath,rel,vf_guest)
	@mkdir -p $(dir $@)
	$(Q)$(CC) -static -pthread -o $@ $^

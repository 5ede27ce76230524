# SPDX-License-Identifier: MIT
MODULES += vmm_glue
vmm_glue_DIR := vmm_glue
vmm_glue_DEPS := ctlclient common
vmm_glue_LDLIBS := -lvirt -lxml2 -ljson-c
vmm_glue_TSAN_TESTS :=

# libxml2 keeps its headers under /usr/include/libxml2 (only meta.c includes them).
VMM_XML_CFLAGS := $(shell pkg-config --cflags libxml-2.0 2>/dev/null || echo -I/usr/include/libxml2)
$(foreach v,$(VARIANTS),$(eval $(BUILD)/$(v)/obj/vmm_glue/meta.o: EXTRA_CFLAGS += $(VMM_XML_CFLAGS)))

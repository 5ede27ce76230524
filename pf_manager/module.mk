MODULES += pf_manager
pf_manager_DIR := pf_manager
pf_manager_DEPS := gpu_model iommu_model pma common
pf_manager_LDLIBS := -ljson-c -linih
pf_manager_TSAN_TESTS :=

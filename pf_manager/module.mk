MODULES += pf_manager
pf_manager_DIR := pf_manager
pf_manager_DEPS := rm rm_hw rm_gsp pma gpu_model iommu_model ctlclient common
pf_manager_LDLIBS := -ljson-c -linih -lurcu-memb -lurcu-cds -lurcu-common
pf_manager_TSAN_TESTS :=
pf_manager_TEST_HOOKS := 1

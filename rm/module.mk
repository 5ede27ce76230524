# rm: the shared resource manager (CPU-RM). It talks to the GSP only through rm_gsp's RPCs.
MODULES += rm
rm_DIR := rm
rm_DEPS := rm_gsp pma gpu_model iommu_model common
rm_LDLIBS := -lurcu-memb -lurcu-cds -lurcu-common
rm_TSAN_TESTS :=

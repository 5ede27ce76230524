# SPDX-License-Identifier: MIT
MODULES += gpu_model
gpu_model_DIR := gpu_model
gpu_model_DEPS := iommu_model common
gpu_model_LDLIBS :=
gpu_model_TSAN_TESTS := test_gpu_doorbell test_gpu_errors test_gpu_sysmem test_gpu_restore \
			test_gpu_sched_scale test_gpu_dirty test_gpu_linger test_gpu_inline \
			test_gpu_chan_gone test_gpu_mmu

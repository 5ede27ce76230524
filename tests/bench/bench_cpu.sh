# SPDX-License-Identifier: MIT
# bench_cpu.sh: what CPU a script benchmark ran on, as bench_cpu.h says it for the C ones.
# Sourced; bench_cpu_json prints `"cpu_model": "...", "cpu_cores": N, "cpu_family": F,
# "cpu_model_id": M` (no braces, no trailing comma; -1 where /proc/cpuinfo does not say).

bench_cpu_json() {
	local model family id

	model=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -1 |
		tr -d '"\\' | tr -d '[:cntrl:]')
	family=$(sed -n 's/^cpu family[[:space:]]*:[[:space:]]*\([0-9]*\).*/\1/p' /proc/cpuinfo |
		 head -1)
	id=$(sed -n 's/^model[[:space:]]*:[[:space:]]*\([0-9]*\).*/\1/p' /proc/cpuinfo | head -1)
	printf '"cpu_model": "%s", "cpu_cores": %s, "cpu_family": %s, "cpu_model_id": %s' \
		"${model:-unknown}" "$(getconf _NPROCESSORS_ONLN)" "${family:--1}" "${id:--1}"
}

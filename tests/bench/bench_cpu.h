/* SPDX-License-Identifier: MIT */
/* bench_cpu.h: what CPU a benchmark ran on, for every benchmark's JSON and tables.
 *
 * Figures from different machines are only comparable with the machine named next to them,
 * so each benchmark prints `"cpu_model"` (the first "model name" of /proc/cpuinfo) and
 * `"cpu_cores"` (online logical CPUs). Header only: the benchmarks are built from their own
 * folders and share nothing else. */
#ifndef VGPU_TESTS_BENCH_BENCH_CPU_H
#define VGPU_TESTS_BENCH_BENCH_CPU_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The CPU model into @buf ("unknown" if /proc/cpuinfo does not say), JSON-safe. */
static inline const char *bench_cpu_model(char *buf, size_t len)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[256];
	size_t o = 0;

	snprintf(buf, len, "unknown");
	if (!f)
		return buf;
	while (fgets(line, sizeof(line), f)) {
		char *v = strchr(line, ':');

		if (strncmp(line, "model name", 10) || !v)
			continue;
		for (v++; *v == ' ' || *v == '\t'; v++)
			;
		/* Quotes, backslashes and control bytes would break the JSON string: dropped. */
		for (; *v && *v != '\n' && o + 1 < len; v++)
			if (*v != '"' && *v != '\\' && (unsigned char)*v >= 0x20)
				buf[o++] = *v;
		buf[o] = '\0';
		break;
	}
	fclose(f);
	return buf;
}

/* Online logical CPUs. */
static inline long bench_cpu_cores(void)
{
	return sysconf(_SC_NPROCESSORS_ONLN);
}

/* `"cpu_model": "...", "cpu_cores": N` (no braces, no trailing comma) into @buf. */
static inline const char *bench_cpu_json(char *buf, size_t len)
{
	char model[160];

	snprintf(buf, len, "\"cpu_model\": \"%s\", \"cpu_cores\": %ld",
		 bench_cpu_model(model, sizeof(model)), bench_cpu_cores());
	return buf;
}

/* Open a benchmark's JSON object on stdout with the two keys: prints
 * `{"cpu_model": "...", "cpu_cores": N, ` (the caller prints the rest and the brace). */
static inline void bench_cpu_json_begin(void)
{
	char buf[256];

	printf("{%s, ", bench_cpu_json(buf, sizeof(buf)));
}

#endif

/* SPDX-License-Identifier: MIT */
/* bench_cpu.h: what CPU a benchmark ran on, for every benchmark's JSON and tables.
 *
 * Figures from different machines are only comparable with the machine named next to them,
 * so each benchmark prints `"cpu_model"` (the first "model name" of /proc/cpuinfo),
 * `"cpu_cores"` (online logical CPUs), and `"cpu_family"` and `"cpu_model_id"` (its x86
 * family and model numbers, -1 if not said), which tell apart CPUs a hypervisor names alike
 * ("AMD EPYC" of family 23 or 26). Header only: the benchmarks are built from their own
 * folders and share nothing else; tests/bench/bench_cpu.sh says the same for the scripts. */
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

/* The x86 family and model numbers of the first CPU in /proc/cpuinfo, -1 where not said. */
static inline void bench_cpu_id(int *family, int *model)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[256];
	int v;

	*family = *model = -1;
	if (!f)
		return;
	while ((*family < 0 || *model < 0) && fgets(line, sizeof(line), f)) {
		/* "model name" fails the second pattern at its 'n'. */
		if (*family < 0 && sscanf(line, "cpu family%*[ \t]: %d", &v) == 1)
			*family = v;
		else if (*model < 0 && sscanf(line, "model%*[ \t]: %d", &v) == 1)
			*model = v;
	}
	fclose(f);
}

/* "MODEL NAME (family F model M)" into @buf, for the benchmarks' tables. */
static inline const char *bench_cpu_describe(char *buf, size_t len)
{
	char model[160];
	int family, id;

	bench_cpu_id(&family, &id);
	snprintf(buf, len, "%s (family %d model %d)", bench_cpu_model(model, sizeof(model)),
		 family, id);
	return buf;
}

/* Online logical CPUs. */
static inline long bench_cpu_cores(void)
{
	return sysconf(_SC_NPROCESSORS_ONLN);
}

/* `"cpu_model": "...", "cpu_cores": N, "cpu_family": F, "cpu_model_id": M` (no braces, no
 * trailing comma) into @buf. */
static inline const char *bench_cpu_json(char *buf, size_t len)
{
	char model[160];
	int family, id;

	bench_cpu_id(&family, &id);
	snprintf(buf, len, "\"cpu_model\": \"%s\", \"cpu_cores\": %ld, "
		 "\"cpu_family\": %d, \"cpu_model_id\": %d",
		 bench_cpu_model(model, sizeof(model)), bench_cpu_cores(), family, id);
	return buf;
}

/* Open a benchmark's JSON object on stdout with the four keys: prints
 * `{"cpu_model": "...", "cpu_cores": N, ..., ` (the caller prints the rest and the brace). */
static inline void bench_cpu_json_begin(void)
{
	char buf[320];

	printf("{%s, ", bench_cpu_json(buf, sizeof(buf)));
}

#endif

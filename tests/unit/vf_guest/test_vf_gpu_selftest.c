/* The guest suite's GPU cases (address spaces, channels, COPY/FILL/compute against a CPU
 * reference, semaphores, 64 channels, isolation attacks) against the real emulated GPU: runs
 * `../../bin/submit_bench --selftest`, which serves gpu_model + iommu_model in-process with
 * the BAR2 extension vgpud does not have yet, and passes its TAP through. The driver library
 * links no host code, so this is the one place its GPU path meets the device model; the bench
 * is built in the rel variant only, elsewhere this reports a skip. */
#include <limits.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
	char exe[PATH_MAX], prog[PATH_MAX + 32], line[512];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	FILE *p;
	int st;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (n < 0) {
		printf("1..1\nok 1 - GPU selftest # SKIP cannot find this program\n");
		return 0;
	}
	exe[n] = 0;
	snprintf(prog, sizeof(prog), "%s/../../bin/submit_bench", dirname(exe));
	if (access(prog, X_OK)) {
		printf("1..1\nok 1 - GPU selftest # SKIP submit_bench is built in the rel variant only\n");
		return 0;
	}
	strncat(prog, " --selftest 2>&1", sizeof(prog) - strlen(prog) - 1);
	p = popen(prog, "r");
	if (!p) {
		printf("1..1\nnot ok 1 - GPU selftest: cannot run %s\n", prog);
		return 1;
	}
	while (fgets(line, sizeof(line), p))
		fputs(line, stdout);
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

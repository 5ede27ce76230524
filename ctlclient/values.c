// SPDX-License-Identifier: MIT
/* Values as the control protocol and its users write them: sizes and UUIDs. vgpud parses
 * its configuration and requests with the same functions, so the CLI and the daemon accept
 * exactly the same text. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "ctlclient/ctlclient.h"

static int size_suffix_shift(const char *p, unsigned int *shift)
{
	static const char units[] = "BKMGTP";
	const char *u;

	if (!*p) {
		*shift = 0;
		return 0;
	}
	u = strchr(units, *p == 'b' ? 'B' : (*p >= 'a' && *p <= 'z' ? *p - 32 : *p));
	if (!u || !*u)
		return -EINVAL;
	*shift = (unsigned int)(u - units) * 10;
	p++;
	/* "G", "GB", "GiB" all mean 2^30: sizes here are IEC throughout. */
	if (*shift && (!strcmp(p, "iB") || !strcmp(p, "ib") || !strcmp(p, "B")))
		return 0;
	return *p ? -EINVAL : 0;
}

int ctlc_size_parse(const char *s, uint64_t *out)
{
	unsigned long long v;
	unsigned int shift;
	char *end;

	if (!s || !*s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return -ERANGE;
	while (*end == ' ')
		end++;
	if (size_suffix_shift(end, &shift))
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = (uint64_t)v << shift;
	return 0;
}

const char *ctlc_size_format(uint64_t bytes, char *buf, size_t len)
{
	static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	unsigned int u = 0;
	uint64_t whole = bytes;

	while (whole >= 1024 && u < 5) {
		whole >>= 10;
		u++;
	}
	if (!u || !(bytes & ((1ull << (10 * u)) - 1)))
		snprintf(buf, len, "%" PRIu64 " %s", whole, units[u]);
	else
		snprintf(buf, len, "%.1f %s", (double)bytes / (double)(1ull << (10 * u)), units[u]);
	return buf;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int ctlc_uuid_parse(const char *s, char out[CTLC_UUID_STR], uint8_t bytes[16])
{
	uint8_t b[16];
	unsigned int n = 0;

	if (!s || strlen(s) != 36)
		return -EINVAL;
	for (unsigned int i = 0; i < 36;) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i++] != '-')
				return -EINVAL;
			continue;
		}
		int hi = hexval(s[i]), lo = hexval(s[i + 1]);

		if (hi < 0 || lo < 0)
			return -EINVAL;
		b[n++] = (uint8_t)(hi << 4 | lo);
		i += 2;
	}
	if (bytes)
		memcpy(bytes, b, 16);
	if (out) {
		for (unsigned int i = 0; i < 36; i++)
			out[i] = (char)(s[i] >= 'A' && s[i] <= 'F' ? s[i] + 32 : s[i]);
		out[36] = 0;
	}
	return 0;
}

void ctlc_uuid_generate(char out[CTLC_UUID_STR])
{
	uint8_t b[16];

	if (getrandom(b, sizeof(b), 0) != sizeof(b)) {
		/* Only without entropy at early boot; the clock keeps UUIDs distinct. */
		uint64_t t = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);

		for (unsigned int i = 0; i < 16; i++)
			b[i] = (uint8_t)(t >> (8 * (i % 8))) ^ (uint8_t)(i * 37);
	}
	b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
	b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
	snprintf(out, CTLC_UUID_STR,
		 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
		 b[12], b[13], b[14], b[15]);
}

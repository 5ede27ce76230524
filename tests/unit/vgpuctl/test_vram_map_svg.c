// SPDX-License-Identifier: MIT
/* vgpuctl's VRAM-map SVG: rendered by rsvg-convert (librsvg) to a PNG of the declared
 * size; no two text labels overlap (boxes from each <text>'s position, anchor, font size
 * and length in the monospace font's 0.6 em advance); a label drawn in the bar stays inside
 * one box; every slice is in the legend; a scale runs from 0 to the VRAM size. Maps of
 * 3 large slices and of 63 slices, tiny ones among them. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "vgpuctl/vgpuctl_internal.h"

#define MIB		(1ull << 20)
#define GLYPH_EM	0.6		/* DejaVu Sans Mono's advance is 0.602 em */
#define MAX_ITEMS	512

struct box {
	double x0, y0, x1, y1;
	char text[128];
};

static struct box texts[MAX_ITEMS], bars[MAX_ITEMS];
static int ntexts, nbars;
static double svg_w, svg_h;
static char dir[] = "/tmp/vgpu-svg-XXXXXX";

static json_object *segment(const char *kind, uint64_t base, uint64_t size, unsigned int vf)
{
	json_object *s = json_object_new_object();
	char uuid[40];

	json_object_object_add(s, "kind", json_object_new_string(kind));
	json_object_object_add(s, "base", json_object_new_uint64(base));
	json_object_object_add(s, "size", json_object_new_uint64(size));
	if (!strcmp(kind, "slice")) {
		snprintf(uuid, sizeof(uuid), "%08x-0000-4000-8000-000000000000", vf);
		json_object_object_add(s, "vf", json_object_new_int((int)vf));
		json_object_object_add(s, "uuid", json_object_new_string(uuid));
		json_object_object_add(s, "type", json_object_new_string("vgpu-<test>&"));
		json_object_object_add(s, "used_bytes", json_object_new_uint64(size / 2));
	}
	return s;
}

/* A map of @total bytes: 256 MiB spare, then the slices of @sizes (MiB), a free 64 MiB gap
 * after every fifth, the rest free. */
static json_object *map_of(uint64_t total, const unsigned int *sizes, unsigned int n)
{
	json_object *m = json_object_new_object(), *segs = json_object_new_array();
	uint64_t at = 256 * MIB;

	json_object_object_add(m, "vram_bytes", json_object_new_uint64(total));
	json_object_array_add(segs, segment("pf-spare", 0, at, 0));
	for (unsigned int i = 0; i < n; i++) {
		json_object_array_add(segs, segment("slice", at, sizes[i] * MIB, i + 1));
		at += sizes[i] * MIB;
		if (i % 5 == 4) {
			json_object_array_add(segs, segment("free", at, 64 * MIB, 0));
			at += 64 * MIB;
		}
	}
	assert_true(at <= total);
	if (at < total)
		json_object_array_add(segs, segment("free", at, total - at, 0));
	json_object_object_add(m, "segments", segs);
	return m;
}

static double attr(const char *tag, const char *end, const char *name, double dflt)
{
	char key[32];
	const char *p;

	snprintf(key, sizeof(key), " %s='", name);
	p = strstr(tag, key);
	return p && p < end ? strtod(p + strlen(key), NULL) : dflt;
}

static bool attr_is(const char *tag, const char *end, const char *name, const char *val)
{
	char key[64];
	const char *p;

	snprintf(key, sizeof(key), " %s='%s'", name, val);
	p = strstr(tag, key);
	return p && p < end;
}

/* The characters of a text element's content (an entity is one). */
static size_t text_len(const char *s, const char *end, char *out, size_t max)
{
	size_t n = 0;

	for (; s < end; s++, n++) {
		if (n + 1 < max)
			out[n] = *s;
		if (*s == '&')
			s = strchr(s, ';');
	}
	out[n < max ? n : max - 1] = 0;
	return n;
}

/* Every <text> as a box, every bar <rect> (y 40, height 60) as a box. */
static void parse_svg(const char *svg)
{
	const char *p = strstr(svg, "<svg "), *end;

	ntexts = nbars = 0;
	assert_non_null(p);
	end = strchr(p, '>');
	svg_w = attr(p, end, "width", 0);
	svg_h = attr(p, end, "height", 0);
	for (p = strstr(svg, "<text "); p; p = strstr(end, "<text ")) {
		const char *close;
		struct box *b = &texts[ntexts++];
		double fs, x, w;
		size_t n;

		assert_true(ntexts < MAX_ITEMS);
		end = strchr(p, '>');
		close = strstr(end, "</text>");
		assert_non_null(close);
		fs = attr(p, end, "font-size", 16);
		x = attr(p, end, "x", 0);
		n = text_len(end + 1, close, b->text, sizeof(b->text));
		w = (double)n * fs * GLYPH_EM;
		if (attr_is(p, end, "text-anchor", "middle"))
			x -= w / 2;
		else if (attr_is(p, end, "text-anchor", "end"))
			x -= w;
		b->x0 = x;
		b->x1 = x + w;
		b->y1 = attr(p, end, "y", 0) + fs * 0.25;	/* descenders */
		b->y0 = b->y1 - fs * 1.05;
	}
	for (p = strstr(svg, "<rect "); p; p = strstr(end, "<rect ")) {
		end = strchr(p, '>');
		if (attr(p, end, "y", -1) != 40 || attr(p, end, "height", -1) != 60)
			continue;
		bars[nbars].x0 = attr(p, end, "x", 0);
		bars[nbars].x1 = bars[nbars].x0 + attr(p, end, "width", 0);
		bars[nbars].y0 = 40;
		bars[nbars].y1 = 100;
		nbars++;
		assert_true(nbars < MAX_ITEMS);
	}
}

static char *draw(json_object *m, const char *name)
{
	char path[128], *svg;
	FILE *devnull = fopen("/dev/null", "w"), *f;
	long len;

	snprintf(path, sizeof(path), "%s/%s.svg", dir, name);
	assert_int_equal(vgpuctl_vram_map_draw(m, devnull, false, path), 0);
	fclose(devnull);
	f = fopen(path, "r");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	rewind(f);
	svg = calloc(1, (size_t)len + 1);
	assert_int_equal(fread(svg, 1, (size_t)len, f), (size_t)len);
	fclose(f);
	return svg;
}

/* rsvg-convert renders it; the PNG has the SVG's size. */
static void render(const char *name)
{
	char svg[128], png[128], cmd[320];
	unsigned char hdr[24];
	FILE *f;
	int st;

	snprintf(svg, sizeof(svg), "%s/%s.svg", dir, name);
	snprintf(png, sizeof(png), "%s/%s.png", dir, name);
	snprintf(cmd, sizeof(cmd), "rsvg-convert -o '%s' '%s'", png, svg);
	st = system(cmd);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
		fail_msg("rsvg-convert is not installed (librsvg2-bin; make deps)");
	assert_int_equal(st, 0);
	f = fopen(png, "rb");
	assert_non_null(f);
	assert_int_equal(fread(hdr, 1, sizeof(hdr), f), sizeof(hdr));
	fclose(f);
	assert_memory_equal(hdr + 1, "PNG", 3);
	assert_int_equal((hdr[16] << 24 | hdr[17] << 16 | hdr[18] << 8 | hdr[19]), (int)svg_w);
	assert_int_equal((hdr[20] << 24 | hdr[21] << 16 | hdr[22] << 8 | hdr[23]), (int)svg_h);
}

static bool overlap(const struct box *a, const struct box *b)
{
	return a->x0 < b->x1 && b->x0 < a->x1 && a->y0 < b->y1 && b->y0 < a->y1;
}

static void check_layout(unsigned int slices)
{
	unsigned int legend = 0;

	for (int i = 0; i < ntexts; i++) {
		const struct box *t = &texts[i];
		bool in_bar = t->y0 < 100 && t->y1 > 40, inside = false;

		if (t->x0 < 0 || t->x1 > svg_w || t->y0 < 0 || t->y1 > svg_h)
			fail_msg("label \"%s\" leaves the picture", t->text);
		for (int j = i + 1; j < ntexts; j++)
			if (overlap(t, &texts[j]))
				fail_msg("labels \"%s\" and \"%s\" overlap", t->text, texts[j].text);
		for (int k = 0; in_bar && k < nbars; k++)
			inside |= t->x0 >= bars[k].x0 && t->x1 <= bars[k].x1 && t->y0 >= 40 &&
				  t->y1 <= 100;
		if (in_bar && !inside)
			fail_msg("label \"%s\" spills out of its box", t->text);
		legend += !in_bar && !strncmp(t->text, "VF", 2);
	}
	assert_int_equal(legend, slices);
}

static bool has_text(const char *s)
{
	for (int i = 0; i < ntexts; i++)
		if (!strcmp(texts[i].text, s))
			return true;
	return false;
}

static void test_three_slices(void **state)
{
	static const unsigned int sizes[] = { 1024, 1024, 512 };
	json_object *m = map_of(4096 * MIB, sizes, 3);
	char *svg = draw(m, "three");

	(void)state;
	parse_svg(svg);
	render("three");
	check_layout(3);
	assert_true(has_text("VF1 1 GiB"));		/* fits: labelled in its box */
	assert_true(has_text("0 B") || has_text("0"));	/* the scale's ends */
	assert_true(has_text("4 GiB"));
	free(svg);
	json_object_put(m);
}

static void test_63_slices(void **state)
{
	unsigned int sizes[63];
	json_object *m;
	char *svg;

	(void)state;
	for (unsigned int i = 0; i < 63; i++)
		sizes[i] = i % 7 == 0 ? 1024 : i % 3 ? 64 : 256;
	m = map_of(32768 * MIB, sizes, 63);
	svg = draw(m, "many");
	parse_svg(svg);
	render("many");
	check_layout(63);
	assert_true(has_text("0 B") || has_text("0"));
	assert_true(has_text("32 GiB"));
	free(svg);
	json_object_put(m);
}

/* The SVG goes only to a new file: an existing file, a link to one (planted where root
 * writes) and a dangling link are refused with -EEXIST, and the file stays as it was. */
static void test_no_overwrite(void **state)
{
	static const unsigned int sizes[] = { 1024 };
	json_object *m = map_of(4096 * MIB, sizes, 1);
	FILE *devnull = fopen("/dev/null", "w");
	char victim[128], link[128], dangling[128], fresh[128], buf[64] = "";
	FILE *f;

	(void)state;
	snprintf(victim, sizeof(victim), "%s/victim", dir);
	snprintf(link, sizeof(link), "%s/link.svg", dir);
	snprintf(dangling, sizeof(dangling), "%s/dangling.svg", dir);
	snprintf(fresh, sizeof(fresh), "%s/fresh.svg", dir);
	f = fopen(victim, "w");
	assert_non_null(f);
	fputs("keep me", f);
	fclose(f);
	assert_int_equal(symlink(victim, link), 0);
	assert_int_equal(symlink("nowhere", dangling), 0);
	assert_int_equal(vgpuctl_vram_map_draw(m, devnull, false, link), -EEXIST);
	assert_int_equal(vgpuctl_vram_map_draw(m, devnull, false, victim), -EEXIST);
	assert_int_equal(vgpuctl_vram_map_draw(m, devnull, false, dangling), -EEXIST);
	f = fopen(victim, "r");
	assert_non_null(f);
	assert_non_null(fgets(buf, sizeof(buf), f));
	fclose(f);
	assert_string_equal(buf, "keep me");
	snprintf(buf, sizeof(buf), "%s/nowhere", dir);	/* the dangling link's target */
	assert_int_equal(access(buf, F_OK), -1);
	assert_int_equal(vgpuctl_vram_map_draw(m, devnull, false, fresh), 0);
	assert_int_equal(access(fresh, R_OK), 0);
	fclose(devnull);
	json_object_put(m);
}

static int setup(void **state)
{
	(void)state;
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[64];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return getenv("VGPU_SVG_KEEP") || system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	static const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_three_slices),
		cmocka_unit_test(test_63_slices),
		cmocka_unit_test(test_no_overwrite),
	};

	return cmocka_run_group_tests_name("vram_map_svg", tests, setup, teardown);
}

// SPDX-License-Identifier: MIT
/* vgpuctl vram-map: the VRAM layout (PF spare, each slice with its allocated density,
 * free extents) as a coloured terminal bar and as an SVG picture. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ctlclient/ctlclient.h"
#include "vgpuctl/vgpuctl_internal.h"

#define BAR_COLS	64
#define SVG_W		1000

static const char *const slice_fill[] = {
	"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f",
};
static const int slice_ansi[] = { 44, 43, 42, 41, 46, 103, 45, 100 };

static uint64_t jget(json_object *o, const char *key)
{
	json_object *v;

	return json_object_object_get_ex(o, key, &v) ? json_object_get_uint64(v) : 0;
}

static const char *jstr(json_object *o, const char *key)
{
	return vgpuctl_jstr(o, key);
}

/* Which segment covers column @col of @cols over [0, total). */
static json_object *seg_at(json_object *segs, uint64_t total, unsigned int col, unsigned int cols)
{
	uint64_t mid = total / cols * col + total / cols / 2;

	for (size_t i = 0; i < vgpuctl_jlen(segs); i++) {
		json_object *s = json_object_array_get_idx(segs, i);
		uint64_t b = jget(s, "base"), z = jget(s, "size");

		if (mid >= b && mid < b + z)
			return s;
	}
	return NULL;
}

static void draw_cell(FILE *out, json_object *s, bool color)
{
	const char *kind = s ? jstr(s, "kind") : "free";
	unsigned int vf = s ? (unsigned int)jget(s, "vf") : 0;

	if (!strcmp(kind, "slice")) {
		char ch = (char)(vf < 10 ? '0' + vf : 'a' + (vf - 10) % 26);

		if (color)
			fprintf(out, "\033[%d;97m%c\033[0m", slice_ansi[vf % 8], ch);
		else
			fputc(ch, out);
	} else if (!strcmp(kind, "pf-spare")) {
		fputs(color ? "\033[100m#\033[0m" : "#", out);
	} else {
		fputc('.', out);
	}
}

static void draw_terminal(json_object *map, json_object *segs, FILE *out, bool color)
{
	uint64_t total = jget(map, "vram_bytes");
	char a[32], b[32], c[32];

	fprintf(out, "VRAM %s: [", ctlc_size_format(total, a, sizeof(a)));
	for (unsigned int col = 0; col < BAR_COLS; col++)
		draw_cell(out, seg_at(segs, total, col, BAR_COLS), color);
	fprintf(out, "]\n  # PF spare   . free   N slice on VF N (one cell = %s)\n",
		ctlc_size_format(total / BAR_COLS, a, sizeof(a)));
	for (size_t i = 0; i < vgpuctl_jlen(segs); i++) {
		json_object *s = json_object_array_get_idx(segs, i);
		uint64_t size = jget(s, "size"), used = jget(s, "used_bytes");

		fprintf(out, "  %-9s %#14" PRIx64 "  %10s", jstr(s, "kind"), jget(s, "base"),
			ctlc_size_format(size, a, sizeof(a)));
		if (!strcmp(jstr(s, "kind"), "slice"))
			fprintf(out, "  VF %-2u %s  used %s (%.1f%%)  %s", (unsigned int)jget(s, "vf"),
				jstr(s, "uuid"), ctlc_size_format(used, b, sizeof(b)),
				size ? 100.0 * (double)used / (double)size : 0.0, jstr(s, "type"));
		fputc('\n', out);
	}
	(void)c;
}

/* ---- SVG --------------------------------------------------------------------------------
 * Monospace text, so a label's width is known without a font engine (0.6 em per character,
 * DejaVu Sans Mono's advance; CH_W adds a margin). A slice's label goes inside its box only
 * when it fits there whole; every slice is also in the legend below the scale, so the
 * picture stays readable with 63 slices. */
#define SVG_PAD		10
#define SVG_BAR_W	(SVG_W - 2 * SVG_PAD)
#define SVG_BAR_Y	40
#define SVG_BAR_H	60
#define SVG_FONT	12
#define CH_W		(SVG_FONT * 0.62)
#define SCALE_TICKS	4		/* intervals on the scale */
#define LEG_Y		(SVG_BAR_Y + SVG_BAR_H + 44)
#define LEG_COLS	4
#define LEG_COL_W	(SVG_BAR_W / LEG_COLS)
#define LEG_ROW_H	18

static double px(uint64_t v, uint64_t total)
{
	return total ? (double)v * SVG_BAR_W / (double)total : 0;
}

/* @s with the XML special characters escaped. */
static void svg_text(FILE *f, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '&': fputs("&amp;", f); break;
		case '\'': fputs("&apos;", f); break;
		case '"': fputs("&quot;", f); break;
		default: fputc(*s, f);
		}
	}
}

/* The label inside a slice's box: "VF3 1 GiB", else "3", else none (legend only). */
static void svg_inner_label(FILE *f, unsigned int vf, const char *size, double x, double w)
{
	char label[48];

	snprintf(label, sizeof(label), "VF%u %s", vf, size);
	if ((double)strlen(label) * CH_W + 6 > w)
		snprintf(label, sizeof(label), "%u", vf);
	if ((double)strlen(label) * CH_W + 4 > w)
		return;
	fprintf(f, "<text x='%.2f' y='%d' font-size='%d' fill='#fff'>%s</text>\n", x + 2,
		SVG_BAR_Y + 16, SVG_FONT, label);
}

/* Whether @r is [base, size], two integers that lie inside [@sb, @sb + @sz). */
static bool alloc_pair(json_object *r, uint64_t sb, uint64_t sz, uint64_t *b, uint64_t *z)
{
	json_object *jb, *jz;

	if (!json_object_is_type(r, json_type_array) || json_object_array_length(r) != 2)
		return false;
	jb = json_object_array_get_idx(r, 0);
	jz = json_object_array_get_idx(r, 1);
	if (!json_object_is_type(jb, json_type_int) || !json_object_is_type(jz, json_type_int))
		return false;
	*b = json_object_get_uint64(jb);
	*z = json_object_get_uint64(jz);
	return *b >= sb && *z <= sz && *b - sb <= sz - *z;
}

static void svg_slice(FILE *f, json_object *s, uint64_t total)
{
	unsigned int vf = (unsigned int)jget(s, "vf");
	double x = SVG_PAD + px(jget(s, "base"), total), w = px(jget(s, "size"), total);
	json_object *al = NULL;
	char a[32];

	ctlc_size_format(jget(s, "size"), a, sizeof(a));
	fprintf(f, "<rect x='%.2f' y='%d' width='%.2f' height='%d' fill='%s' stroke='#222'>"
		"<title>VF %u ", x, SVG_BAR_Y, w, SVG_BAR_H, slice_fill[vf % 8], vf);
	svg_text(f, jstr(s, "uuid"));
	fprintf(f, " %s</title></rect>\n", a);
	/* Allocated runs inside the partition, darker, in the lower half. */
	al = vgpuctl_jarr(s, "allocations", false);
	for (size_t i = 0; i < vgpuctl_jlen(al); i++) {
		json_object *r = json_object_array_get_idx(al, i);
		uint64_t b, z;

		if (!alloc_pair(r, jget(s, "base"), jget(s, "size"), &b, &z)) {
			vgpuctl_reply_bad("\"allocations\"[%zu] of VF %u is not a [base, size] "
					  "pair inside the slice", i, vf);
			continue;
		}
		fprintf(f, "<rect x='%.2f' y='%d' width='%.2f' height='%d' fill='#000' "
			"fill-opacity='0.45'/>\n", SVG_PAD + px(b, total), SVG_BAR_Y + SVG_BAR_H / 2,
			px(z, total) < 0.5 ? 0.5 : px(z, total), SVG_BAR_H / 2);
	}
	svg_inner_label(f, vf, a, x, w);
}

/* Ticks and sizes under the bar: 0, each quarter, the total (the ends anchored inward). */
static void svg_scale(FILE *f, uint64_t total)
{
	int y = SVG_BAR_Y + SVG_BAR_H;
	char a[32];

	for (int i = 0; i <= SCALE_TICKS; i++) {
		double x = SVG_PAD + (double)SVG_BAR_W * i / SCALE_TICKS;
		const char *anchor = !i ? "start" : i == SCALE_TICKS ? "end" : "middle";

		fprintf(f, "<line x1='%.2f' y1='%d' x2='%.2f' y2='%d' stroke='#222'/>\n", x, y, x,
			y + 6);
		fprintf(f, "<text x='%.2f' y='%d' font-size='%d' text-anchor='%s'>%s</text>\n", x,
			y + 20, SVG_FONT, anchor,
			ctlc_size_format(total / SCALE_TICKS * (uint64_t)i, a, sizeof(a)));
	}
}

/* One legend entry in cell @n: a swatch and its text (cut to the cell). */
static void svg_legend_entry(FILE *f, unsigned int n, const char *fill, const char *text)
{
	double x = SVG_PAD + (double)(n % LEG_COLS) * LEG_COL_W;
	int y = LEG_Y + (int)(n / LEG_COLS) * LEG_ROW_H;
	int max = (int)((LEG_COL_W - 24) / CH_W);

	fprintf(f, "<rect x='%.2f' y='%d' width='12' height='12' fill='%s' stroke='#222'/>\n", x,
		y - 11, fill);
	fprintf(f, "<text x='%.2f' y='%d' font-size='%d'>", x + 16, y, SVG_FONT);
	for (int i = 0; text[i] && i < max; i++) {
		char one[2] = { text[i], 0 };

		svg_text(f, one);
	}
	fputs("</text>\n", f);
}

/* The legend: the three kinds of space, then every slice by VF, size and UUID. */
static void svg_legend(FILE *f, json_object *segs)
{
	unsigned int n = 0;
	char line[96], a[32];

	svg_legend_entry(f, n++, "#999", "PF spare");
	svg_legend_entry(f, n++, "#fff", "free");
	svg_legend_entry(f, n++, "#555", "allocated (dark)");
	n = LEG_COLS;			/* slices start on their own row */
	for (size_t i = 0; i < vgpuctl_jlen(segs); i++) {
		json_object *s = json_object_array_get_idx(segs, i);
		unsigned int vf = (unsigned int)jget(s, "vf");

		if (strcmp(jstr(s, "kind"), "slice"))
			continue;
		snprintf(line, sizeof(line), "VF%-2u %-8s %.8s", vf,
			 ctlc_size_format(jget(s, "size"), a, sizeof(a)), jstr(s, "uuid"));
		svg_legend_entry(f, n++, slice_fill[vf % 8], line);
	}
}

/* @path, a new file: never one that exists, nor what a link there points to (vgpuctl runs
 * as root, and a link planted in a shared directory would have it truncate any file). */
static FILE *svg_create(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644), err;
	FILE *f;

	if (fd < 0)
		return NULL;
	f = fdopen(fd, "w");
	if (!f) {
		err = errno;
		close(fd);
		errno = err;
	}
	return f;
}

static int draw_svg(json_object *map, json_object *segs, const char *path)
{
	uint64_t total = jget(map, "vram_bytes");
	unsigned int slices = 0, rows;
	FILE *f = svg_create(path);
	char a[32];

	if (!f)
		return -errno;
	for (size_t i = 0; i < vgpuctl_jlen(segs); i++)
		slices += !strcmp(jstr(json_object_array_get_idx(segs, i), "kind"), "slice");
	rows = 1 + (slices + LEG_COLS - 1) / LEG_COLS;
	fprintf(f, "<?xml version='1.0' encoding='UTF-8'?>\n"
		"<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' "
		"font-family='DejaVu Sans Mono, monospace'>\n"
		"<rect width='100%%' height='100%%' fill='#fff'/>\n"
		"<text x='%d' y='24' font-size='14'>VRAM %s: %u slice%s</text>\n", SVG_W,
		LEG_Y + (int)rows * LEG_ROW_H, SVG_PAD, ctlc_size_format(total, a, sizeof(a)),
		slices, slices == 1 ? "" : "s");
	for (size_t i = 0; i < vgpuctl_jlen(segs); i++) {
		json_object *s = json_object_array_get_idx(segs, i);
		const char *kind = jstr(s, "kind");

		if (!strcmp(kind, "slice"))
			svg_slice(f, s, total);
		else
			fprintf(f, "<rect x='%.2f' y='%d' width='%.2f' height='%d' fill='%s' "
				"stroke='#222'><title>%s %s</title></rect>\n",
				SVG_PAD + px(jget(s, "base"), total), SVG_BAR_Y,
				px(jget(s, "size"), total), SVG_BAR_H,
				strcmp(kind, "free") ? "#999" : "#fff",
				strcmp(kind, "free") ? "PF spare" : "free",
				ctlc_size_format(jget(s, "size"), a, sizeof(a)));
	}
	svg_scale(f, total);
	svg_legend(f, segs);
	fputs("</svg>\n", f);
	return fclose(f) ? -errno : 0;
}

/* Every segment an object that lies inside the VRAM; else a problem with the reply. */
static int segs_check(json_object *segs, uint64_t total)
{
	for (size_t i = 0; i < vgpuctl_jlen(segs); i++) {
		json_object *s = vgpuctl_jat(segs, i, "segments");
		uint64_t b = jget(s, "base"), z = jget(s, "size");

		if (!s)
			return -EPROTO;
		if (b > total || z > total - b) {
			vgpuctl_reply_bad("\"segments\"[%zu] (base %#" PRIx64 ", size %#" PRIx64
					  ") lies outside the VRAM (%#" PRIx64 " bytes)", i, b, z,
					  total);
			return -EPROTO;
		}
	}
	return 0;
}

int vgpuctl_vram_map_draw(json_object *map, FILE *out, bool color, const char *svg_path)
{
	json_object *segs = vgpuctl_jarr(map, "segments", true);

	if (!segs || segs_check(segs, jget(map, "vram_bytes")))
		return -EPROTO;
	draw_terminal(map, segs, out, color);
	return svg_path ? draw_svg(map, segs, svg_path) : 0;
}

/* vgpuctl vram-map: the VRAM layout (PF spare, each slice with its allocated density,
 * free extents) as a coloured terminal bar and as an SVG picture. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ctlclient/ctlclient.h"
#include "vgpuctl/vgpuctl_internal.h"

#define BAR_COLS	64
#define SVG_W		1000
#define SVG_BAR_Y	40
#define SVG_BAR_H	60

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
	json_object *v;

	return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : "";
}

/* Which segment covers column @col of @cols over [0, total). */
static json_object *seg_at(json_object *segs, uint64_t total, unsigned int col, unsigned int cols)
{
	uint64_t mid = total / cols * col + total / cols / 2;

	for (size_t i = 0; i < json_object_array_length(segs); i++) {
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
	for (size_t i = 0; i < json_object_array_length(segs); i++) {
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

static double px(uint64_t v, uint64_t total)
{
	return total ? (double)v * (SVG_W - 20) / (double)total : 0;
}

static void svg_slice(FILE *f, json_object *s, uint64_t total)
{
	unsigned int vf = (unsigned int)jget(s, "vf");
	double x = 10 + px(jget(s, "base"), total), w = px(jget(s, "size"), total);
	json_object *al = NULL;
	char a[32];

	fprintf(f, "<rect x='%.2f' y='%d' width='%.2f' height='%d' fill='%s' stroke='#222'>"
		"<title>VF %u %s %s</title></rect>\n", x, SVG_BAR_Y, w, SVG_BAR_H,
		slice_fill[vf % 8], vf, jstr(s, "uuid"), ctlc_size_format(jget(s, "size"), a, sizeof(a)));
	/* Allocated runs inside the partition, darker, in the lower half. */
	json_object_object_get_ex(s, "allocations", &al);
	for (size_t i = 0; al && i < json_object_array_length(al); i++) {
		json_object *r = json_object_array_get_idx(al, i);
		uint64_t b = json_object_get_uint64(json_object_array_get_idx(r, 0));
		uint64_t z = json_object_get_uint64(json_object_array_get_idx(r, 1));

		fprintf(f, "<rect x='%.2f' y='%d' width='%.2f' height='%d' fill='#000' "
			"fill-opacity='0.45'/>\n", 10 + px(b, total), SVG_BAR_Y + SVG_BAR_H / 2,
			px(z, total) < 0.5 ? 0.5 : px(z, total), SVG_BAR_H / 2);
	}
	if (w > 40)
		fprintf(f, "<text x='%.2f' y='%d' font-size='12' fill='#fff'>VF%u %s</text>\n", x + 3,
			SVG_BAR_Y + 16, vf, ctlc_size_format(jget(s, "size"), a, sizeof(a)));
}

static int draw_svg(json_object *map, json_object *segs, const char *path)
{
	uint64_t total = jget(map, "vram_bytes");
	FILE *f = fopen(path, "we");
	char a[32];

	if (!f)
		return -errno;
	fprintf(f, "<?xml version='1.0' encoding='UTF-8'?>\n"
		"<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' "
		"font-family='sans-serif'>\n<rect width='100%%' height='100%%' fill='#fff'/>\n"
		"<text x='10' y='24' font-size='16'>VRAM %s: PF spare (grey), slices (colour; dark = "
		"allocated), free (white)</text>\n", SVG_W, SVG_BAR_Y + SVG_BAR_H + 30,
		ctlc_size_format(total, a, sizeof(a)));
	for (size_t i = 0; i < json_object_array_length(segs); i++) {
		json_object *s = json_object_array_get_idx(segs, i);
		const char *kind = jstr(s, "kind");

		if (!strcmp(kind, "slice"))
			svg_slice(f, s, total);
		else
			fprintf(f, "<rect x='%.2f' y='%d' width='%.2f' height='%d' fill='%s' "
				"stroke='#222'><title>%s %s</title></rect>\n",
				10 + px(jget(s, "base"), total), SVG_BAR_Y, px(jget(s, "size"), total),
				SVG_BAR_H, strcmp(kind, "free") ? "#999" : "#fff", kind,
				ctlc_size_format(jget(s, "size"), a, sizeof(a)));
	}
	fprintf(f, "<text x='10' y='%d' font-size='12'>0</text>\n<text x='%d' y='%d' "
		"font-size='12' text-anchor='end'>%s</text>\n</svg>\n", SVG_BAR_Y + SVG_BAR_H + 18,
		SVG_W - 10, SVG_BAR_Y + SVG_BAR_H + 18, ctlc_size_format(total, a, sizeof(a)));
	return fclose(f) ? -errno : 0;
}

int vgpuctl_vram_map_draw(json_object *map, FILE *out, bool color, const char *svg_path)
{
	json_object *segs;

	if (!json_object_object_get_ex(map, "segments", &segs) ||
	    !json_object_is_type(segs, json_type_array))
		return -EPROTO;
	draw_terminal(map, segs, out, color);
	return svg_path ? draw_svg(map, segs, svg_path) : 0;
}

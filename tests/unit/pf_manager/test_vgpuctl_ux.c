// SPDX-License-Identifier: MIT
/* vgpuctl as a new user and an mdevctl user meet it, against a real vgpud: types says
 * what the auto type's counts are (never "Channels: 0") and how many more instances of
 * each type can start; help VERB; list --dumpjson in mdevctl's shape, and define
 * --jsonfile reading that shape back (bad files refused, nothing changed). */
/* pf_test.h copies paths it made itself into sun_path; gcc cannot see their length. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include "pf_test.h"

#define U1 "11111111-1111-4111-8111-111111111111"
#define U2 "22222222-2222-4222-8222-222222222222"

static int setup(void **state)
{
	struct tdaemon *d = t_daemon_new();

	*state = d;
	return t_daemon_start(d, "--vram", "4G", "--max-vfs", "8", "--spare-vram", "512M", NULL);
}

static int teardown(void **state)
{
	return t_teardown(state);
}

/* The text block of type @name in the last "vgpuctl types" output. */
static const char *type_block(const char *name)
{
	static char block[1024];
	char key[80];
	const char *p, *end;

	snprintf(key, sizeof(key), "  %s\n", name);
	p = strstr(t_out.out, key);
	if (!p)
		fail_msg("no type %s in: %s", name, t_out.out);
	p += strlen(key);
	for (end = p; *end && !(end[0] == '\n' && end[1] == ' ' && end[2] == ' ' && end[3] != ' ');
	     end++)
		;
	snprintf(block, sizeof(block), "%.*s", (int)(end - p), p);
	return block;
}

/* available_instances of type @name from "types --json". */
static int available(struct tdaemon *d, const char *name)
{
	json_object *o, *types, *v;
	int n = -1;

	assert_int_equal(T_CTL(d, "--json", "types"), 0);
	o = t_out_json();
	assert_true(json_object_object_get_ex(o, "types", &types));
	for (size_t i = 0; i < json_object_array_length(types); i++) {
		json_object *t = json_object_array_get_idx(types, i);

		if (json_object_object_get_ex(t, "name", &v) &&
		    !strcmp(json_object_get_string(v), name)) {
			assert_true(json_object_object_get_ex(t, "available_instances", &v));
			n = json_object_get_int(v);
		}
	}
	json_object_put(o);
	return n;
}

static void test_types_auto_and_available(void **state)
{
	struct tdaemon *d = *state;
	const char *b;

	assert_int_equal(T_CTL(d, "types"), 0);
	b = type_block("vgpu-auto");
	assert_null(strstr(b, "Channels: 0"));
	assert_non_null(strstr(b, "Channels: auto"));
	assert_non_null(strstr(b, "Available instances: 0"));	/* no VFs enabled */
	assert_int_equal(T_CTL(d, "set-vfs", "4"), 0);
	assert_int_equal(T_CTL(d, "types"), 0);
	b = type_block("vgpu-auto");
	assert_null(strstr(b, "Channels: 0"));
	assert_non_null(strstr(b, "Channels: auto (from the fair share: "));
	assert_non_null(strstr(b, "VRAM: auto (fair share of the enabled VFs: "));
	assert_non_null(strstr(type_block("vgpu-1G"), "Available instances: 3"));
	/* 3.5 GiB usable: three 1 GiB slices fit; each started one takes one away. */
	assert_int_equal(available(d, "vgpu-1G"), 3);
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-1G", "-u", U1), 0);
	assert_int_equal(T_CTL(d, "start", "-u", U1), 0);
	assert_int_equal(available(d, "vgpu-1G"), 2);
	assert_int_equal(available(d, "vgpu-512M"), 3);	/* 3 free VFs bound it */
}

static void test_help_verb(void **state)
{
	struct tdaemon *d = *state;

	assert_int_equal(T_CTL(d, "help", "start"), 0);
	assert_non_null(strstr(t_out.out, "usage: vgpuctl start -u UUID"));
	assert_null(strstr(t_out.out, "set-vfs"));		/* that verb only */
	assert_int_equal(T_CTL(d, "help", "define"), 0);
	assert_non_null(strstr(t_out.out, "--jsonfile FILE"));
	assert_int_equal(T_CTL(d, "help"), 0);
	assert_non_null(strstr(t_out.out, "set-vfs"));		/* every verb */
	assert_int_equal(T_CTL(d, "help", "boot"), 2);
	assert_non_null(strstr(t_out.err, "help: unknown verb \"boot\""));
	assert_int_equal(T_CTL(d, "help", "start", "stop"), 2);
}

static char *parent_of(struct tdaemon *d)
{
	static char parent[64];
	json_object *o, *v;

	assert_int_equal(T_CTL(d, "--json", "status"), 0);
	o = t_out_json();
	assert_true(json_object_object_get_ex(o, "parent", &v));
	snprintf(parent, sizeof(parent), "%s", json_object_get_string(v));
	json_object_put(o);
	return parent;
}

static void write_file(const char *path, const char *s)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(s, f);
	fclose(f);
}

static void test_dumpjson_jsonfile(void **state)
{
	struct tdaemon *d = *state;
	json_object *o, *list, *dev, *v;
	char path[256], *before;
	const char *parent = parent_of(d);

	assert_int_equal(T_CTL(d, "set-vfs", "2"), 0);
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-512M", "-u", U1, "--auto", "--channels",
			       "3"), 0);
	assert_int_equal(T_CTL(d, "list", "--dumpjson"), 0);
	o = t_out_json();
	assert_true(json_object_object_get_ex(o, parent, &list));
	assert_int_equal(json_object_array_length(list), 1);
	assert_true(json_object_object_get_ex(json_object_array_get_idx(list, 0), U1, &dev));
	assert_true(json_object_object_get_ex(dev, "mdev_type", &v));
	assert_string_equal(json_object_get_string(v), "vgpu-512M");
	assert_true(json_object_object_get_ex(dev, "start", &v));
	assert_string_equal(json_object_get_string(v), "auto");
	assert_true(json_object_object_get_ex(dev, "attrs", &v));
	assert_non_null(strstr(json_object_to_json_string(v), "\"channels\""));

	/* The device object, as mdevctl would write it, defines an equal slice. */
	snprintf(path, sizeof(path), "%s/dev.json", d->root);
	write_file(path, json_object_to_json_string(dev));
	json_object_put(o);
	assert_int_equal(T_CTL(d, "define", "-u", U2, "--jsonfile", path), 0);
	assert_int_equal(T_CTL(d, "list", "--dumpjson", "-u", U2), 0);
	o = t_out_json();
	assert_true(json_object_object_get_ex(o, parent, &list));
	assert_true(json_object_object_get_ex(json_object_array_get_idx(list, 0), U2, &dev));
	assert_true(json_object_object_get_ex(dev, "start", &v));
	assert_string_equal(json_object_get_string(v), "auto");
	assert_true(json_object_object_get_ex(dev, "attrs", &v));
	assert_non_null(strstr(json_object_to_json_string(v), "\"channels\": 3"));
	json_object_put(o);
	assert_int_equal(T_CTL(d, "undefine", "-u", U2), 0);

	/* Bad files: exit 2, the file and what is wrong named, nothing defined. */
	static const struct { const char *text, *msg; bool with_type; } bad[] = {
		{ "[1, 2]", "needs an object with a string \"mdev_type\"", false },
		{ "{\"start\": \"auto\"}", "needs an object with a string \"mdev_type\"", false },
		{ "{\"mdev_type\": \"vgpu-512M\", \"start\": \"sometimes\"}",
		  "\"start\" must be \"auto\" or \"manual\"", false },
		{ "{\"mdev_type\": \"vgpu-512M\", \"attrs\": {}}", "\"attrs\" must be an array", false },
		{ "{\"mdev_type\": ", "cannot read it as JSON", false },
		{ "{\"mdev_type\": \"vgpu-512M\"}", "in the file or as options, not both", true },
	};
	assert_int_equal(T_CTL(d, "--json", "list"), 0);
	before = strdup(t_out.out);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_file(path, bad[i].text);
		if (bad[i].with_type)
			T_CTL(d, "define", "-u", U2, "-t", "vgpu-512M", "--jsonfile", path);
		else
			T_CTL(d, "define", "-u", U2, "--jsonfile", path);
		if (t_out.rc != 2 || !strstr(t_out.err, bad[i].msg) || !strstr(t_out.err, path))
			fail_msg("%s: exit %d, stderr %s", bad[i].text, t_out.rc, t_out.err);
	}
	assert_int_equal(T_CTL(d, "--json", "list"), 0);
	assert_string_equal(before, t_out.out);
	free(before);
}

int main(void)
{
	static const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_types_auto_and_available, setup, teardown),
		cmocka_unit_test_setup_teardown(test_help_verb, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dumpjson_jsonfile, setup, teardown),
	};

	return cmocka_run_group_tests_name("vgpuctl_ux", tests, NULL, NULL);
}

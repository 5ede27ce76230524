// SPDX-License-Identifier: MIT
/* pf_json_dup_check() and pf_json_parse_checked(): a key an object repeats is refused naming
 * the key and the object's path, keys compared as json-c decodes them (escapes, surrogate
 * pairs, a NUL byte that cuts a key); a key again in a sibling object, or spelled apart by
 * an escape, is not a repeat; a repeat whose earlier value is another kind or shape of value
 * is named as that key, not as whatever differs inside it; json-c's laxer texts (comments,
 * single quotes, trailing commas, NaN) are walked as json-c walks them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/compiler.h"
#include "pf_manager/pf_internal.h"

static const struct dup_case {
	const char *name;
	const char *text;
	const char *why;	/* the message; NULL: no repeat */
} dup_cases[] = {
	/* ---- repeats, named with their object ---- */
	{ "top level", "{\"cmd\":\"a\",\"cmd\":\"b\"}",
	  "key \"cmd\" appears twice in the top-level object" },
	{ "nested", "{\"execute\":\"reset-vf\",\"args\":{\"uuid\":\"A\",\"uuid\":\"B\"}}",
	  "key \"uuid\" appears twice in \"args\"" },
	{ "escaped second", "{\"args\":{\"vf\":1,\"\\u0076f\":2}}",
	  "key \"vf\" appears twice in \"args\"" },
	{ "escaped first", "{\"\\u0076\\u0066\":1,\"vf\":2}",
	  "key \"vf\" appears twice in the top-level object" },
	{ "escaped solidus", "{\"a/b\":1,\"a\\/b\":2}",
	  "key \"a/b\" appears twice in the top-level object" },
	{ "surrogate pair", "{\"\\ud83d\\ude00\":1,\"\xf0\x9f\x98\x80\":2}",
	  "key \"\xf0\x9f\x98\x80\" appears twice in the top-level object" },
	{ "in an array of objects",
	  "{\"attrs\":[{\"vram\":\"1G\"},{\"channels\":2,\"priority\":1,\"channels\":4}]}",
	  "key \"channels\" appears twice in \"attrs[1]\"" },
	{ "deep", "[0,{\"a\":{\"b\":[[],{\"c\":1,\"d\":null,\"c\":2}]}}]",
	  "key \"c\" appears twice in \"[1].a.b[1]\"" },
	{ "three times", "{\"a\":1,\"b\":2,\"a\":3,\"a\":4}",
	  "key \"a\" appears twice in the top-level object" },
	{ "earlier value another object", "{\"a\":{\"x\":1},\"a\":{\"y\":1,\"y\":2}}",
	  "key \"a\" appears twice in the top-level object" },
	{ "earlier value another kind", "{\"k\":{\"a\":{\"x\":1},\"b\":2,\"a\":[1,2]}}",
	  "key \"a\" appears twice in \"k\"" },
	{ "earlier value an array", "{\"a\":[{\"x\":1},{\"x\":1}],\"a\":[]}",
	  "key \"a\" appears twice in the top-level object" },
	{ "keys json-c cuts at a NUL", "{\"a\\u0000b\":1,\"a\\u0000c\":2}",
	  "key \"a\" appears twice in the top-level object" },
	{ "control byte shown as ?", "{\"a\\nb\":1,\"a\\nb\":2}",
	  "key \"a?b\" appears twice in the top-level object" },
	{ "quote shown as ?", "{\"o\":{\"a\\\"b\":1,\"a\\\"b\":2}}",
	  "key \"a?b\" appears twice in \"o\"" },
	{ "space and newlines", " {\n\t\"a\" :\r\n 1 ,\n \"a\"\t: 2 \n} ",
	  "key \"a\" appears twice in the top-level object" },
	{ "comments, single quotes, trailing commas",
	  "{'k':[1,],/* \"k\": */\"o\":{},// 'k'\n\"k\":NaN,}",
	  "key \"k\" appears twice in the top-level object" },
	{ "after a nested string with brackets", "{\"s\":\"{\\\"a\\\":[}\",\"s\":1}",
	  "key \"s\" appears twice in the top-level object" },
	/* ---- not repeats ---- */
	{ "sibling objects", "[{\"x\":1,\"y\":{\"x\":2}},{\"x\":1,\"y\":{\"x\":2}}]", NULL },
	{ "same key at each level", "{\"a\":{\"a\":{\"a\":[{\"a\":1},{\"a\":2}]}}}", NULL },
	{ "escapes that differ", "{\"a\\\"b\":1,\"a\\\\b\":2,\"a/b\":3,\"a\\u0000\":4}", NULL },
	{ "case differs", "{\"vf\":1,\"VF\":2,\"Vf\":3}", NULL },
	{ "empty containers", "{\"a\":{},\"b\":[],\"c\":[{}],\"d\":\"\"}", NULL },
	{ "a scalar", " 42 ", NULL },
	{ "a string", "\"{\\\"a\\\":1,\\\"a\\\":2}\"", NULL },
	{ "literals", "[true,FALSE,null,-1.5e3,Infinity,'x',\"y\",]", NULL },
};

static void test_dup(void **state)
{
	const struct dup_case *c = *state;
	json_object *root = json_tokener_parse(c->text);
	char why[160] = "unset";
	int r;

	if (!root)
		fail_msg("%s: json-c does not take the text", c->name);
	r = pf_json_dup_check(c->text, strlen(c->text), root, why, sizeof(why));
	if (c->why) {
		assert_int_equal(r, -EBADMSG);
		assert_string_equal(why, c->why);
		/* Without room for a message the answer is the same. */
		assert_int_equal(pf_json_dup_check(c->text, strlen(c->text), root, NULL, 0),
				 -EBADMSG);
	} else {
		assert_int_equal(r, 0);
		assert_string_equal(why, "unset");
	}
	json_object_put(root);
}

/* A long key and a deep path are cut with "...", inside the buffer given. */
static void test_long(void **state)
{
	char text[2048], why[96], *p = text;
	json_object *root;

	(void)state;
	for (int i = 0; i < 20; i++)
		p += sprintf(p, "{\"level%02d\":", i);
	p += sprintf(p, "{\"%0200d\":1,\"%0200d\":2}", 7, 7);
	for (int i = 0; i < 20; i++)
		*p++ = '}';
	*p = 0;
	root = json_tokener_parse(text);
	assert_non_null(root);
	memset(why, 'x', sizeof(why));
	assert_int_equal(pf_json_dup_check(text, strlen(text), root, why, sizeof(why)),
			 -EBADMSG);
	assert_non_null(memchr(why, 0, sizeof(why)));
	assert_true(!strncmp(why, "key \"00000", 10));
	assert_non_null(strstr(why, "..."));
	json_object_put(root);
}

/* Many keys in one object and many objects: a repeat at the very end is still found. */
static void test_wide(void **state)
{
	size_t n = 20000, cap = n * 24 + 64, len = 0;
	char *text = malloc(cap), why[160];
	json_object *root;

	(void)state;
	assert_non_null(text);
	len += (size_t)sprintf(text + len, "{");
	for (size_t i = 0; i < n; i++)
		len += (size_t)sprintf(text + len, "\"k%zu\":{\"v\":%zu},", i, i);
	len += (size_t)sprintf(text + len, "\"k%zu\":{\"v\":0}}", n / 2);
	root = json_tokener_parse(text);
	assert_non_null(root);
	assert_int_equal(pf_json_dup_check(text, len, root, why, sizeof(why)), -EBADMSG);
	assert_string_equal(why, "key \"k10000\" appears twice in the top-level object");
	json_object_put(root);
	free(text);
}

/* pf_json_parse_checked(): the value, or NULL and a message saying what is wrong. */
static void test_parse_checked(void **state)
{
	static const char ok[] = "{\"a\":[{\"b\":1},{\"b\":2}]}\n";
	static const char dup[] = "{\"vram\":1,\"vram\":2}\n";
	static const char bad[] = "{\"vram\":";
	json_object *o = (json_object *)&o;
	char why[160];

	(void)state;
	assert_int_equal(pf_json_parse_checked(ok, strlen(ok), &o, why, sizeof(why)), 0);
	assert_true(json_object_is_type(o, json_type_object));
	json_object_put(o);
	assert_int_equal(pf_json_parse_checked(dup, strlen(dup), &o, why, sizeof(why)), -EBADMSG);
	assert_null(o);
	assert_string_equal(why, "key \"vram\" appears twice in the top-level object");
	assert_int_equal(pf_json_parse_checked(bad, strlen(bad), &o, why, sizeof(why)), -EBADMSG);
	assert_null(o);
	assert_string_equal(why, "not one valid JSON value");
	assert_int_equal(pf_json_parse_strict(dup, strlen(dup), &o), -EBADMSG);
	assert_null(o);
}

int main(void)
{
	struct CMUnitTest t[VGPU_ARRAY_SIZE(dup_cases) + 3];
	size_t n = 0;

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(dup_cases); i++)
		t[n++] = (struct CMUnitTest){ dup_cases[i].name, test_dup, NULL, NULL,
					      (void *)&dup_cases[i] };
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_long);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_wide);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_parse_checked);
	return _cmocka_run_group_tests("pf_json", t, n, NULL, NULL);
}

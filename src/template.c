/*
 * template: --process-cmd templates (see template.h).
 */
#include "eshard/template.h"
#include "eshard/log.h"

#include <stdlib.h>
#include <string.h>


static int is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Split a template into words (quote removal only); on a syntax error, *why says which. */
static int split_template(const char *t, struct es_strv *words, const char **why)
{
	struct es_buf w = ES_BUF_INIT;
	int in_word = 0, rc = 0;
	*why = NULL;
	for (const char *p = t; !rc; p++) {
		char c = *p;
		if (c == '\0' || is_blank(c)) {
			if (in_word) {
				rc = es_strv_push(words, es_buf_detach(&w, NULL));
				in_word = 0;
			}
			if (c == '\0')
				break;
		} else if (c == '\'') {
			in_word = 1;
			const char *end = strchr(p + 1, '\'');
			if (!end) {
				*why = "unmatched single quote";
				break;
			}
			rc = es_buf_add(&w, p + 1, (size_t)(end - p - 1));
			p = end;
		} else if (c == '"') {
			in_word = 1;
			for (p++; !rc && *p != '"'; p++) {
				if (*p == '\0') {
					*why = "unmatched double quote";
					break;
				}
				/* As in sh: inside double quotes a backslash escapes only '"' and '\'. */
				if (*p == '\\' && (p[1] == '"' || p[1] == '\\'))
					p++;
				rc = es_buf_addc(&w, *p);
			}
			if (*why)
				break;
		} else if (c == '\\') {
			in_word = 1;
			if (p[1] == '\0') {
				*why = "ends with a lone backslash";
				break;
			}
			rc = es_buf_addc(&w, *++p);
		} else {
			in_word = 1;
			rc = es_buf_addc(&w, c);
		}
	}
	es_buf_free(&w);
	return *why ? ES_EINVAL : rc;
}

struct placeholder {
	const char *name;
	const char *value;
	int used;
};

/* Replace the placeholders of one word into out; ES_EINVAL with a message in why on a bad
 * brace or an unknown name. */
static int substitute(const char *word, struct placeholder *ph, size_t n_ph, struct es_buf *out,
		      struct es_buf *why)
{
	int rc = 0;
	es_buf_reset(out);
	for (const char *p = word; *p && !rc; p++) {
		if (p[0] == '{' && p[1] == '{') {
			rc = es_buf_addc(out, '{');
			p++;
		} else if (p[0] == '}' && p[1] == '}') {
			rc = es_buf_addc(out, '}');
			p++;
		} else if (*p == '}') {
			rc = es_buf_printf(why, "a single '}' in '%s' (write '}}' for a literal brace)", word);
			return rc ? rc : ES_EINVAL;
		} else if (*p == '{') {
			const char *end = strchr(p, '}');
			size_t i;
			for (i = 0; end && i < n_ph; i++)
				if (strlen(ph[i].name) == (size_t)(end - p - 1) &&
				    !strncmp(ph[i].name, p + 1, (size_t)(end - p - 1)))
					break;
			if (!end || i == n_ph) {
				if (!end)
					rc = es_buf_printf(why, "an unmatched '{' in '%s' (write '{{' for a literal brace)",
							   word);
				else
					rc = es_buf_printf(why, "unknown placeholder '%.*s' (known: {input} {output} "
							   "{attempt_dir} {shard_id} {job_dir})", (int)(end - p + 1), p);
				return rc ? rc : ES_EINVAL;
			}
			ph[i].used = 1;
			rc = es_buf_adds(out, ph[i].value);
			p = end;
		} else {
			rc = es_buf_addc(out, *p);
		}
	}
	return rc;
}

/* Expand a template into argv; errors are reported with code (usage at prepare, invalid job
 * state at run time). */
static int expand_template(const char *tmpl, struct placeholder *ph, size_t n_ph, int code,
			   struct es_strv *argv)
{
	struct es_strv words = { 0 };
	struct es_buf word = ES_BUF_INIT, why = ES_BUF_INIT;
	const char *syntax;
	int rc = split_template(tmpl ? tmpl : "", &words, &syntax);
	if (rc == ES_EINVAL)
		rc = es_error(code, "bad processor command template '%s': %s", tmpl, syntax);
	if (!rc && words.n == 0)
		rc = es_error(code, "bad processor command template '%s': it has no program", tmpl ? tmpl : "");
	for (size_t i = 0; !rc && i < words.n; i++) {
		rc = substitute(words.v[i], ph, n_ph, &word, &why);
		if (rc == ES_EINVAL)
			rc = es_error(code, "bad processor command template '%s': %s", tmpl, why.data);
		if (!rc)
			rc = es_strv_push(argv, es_buf_detach(&word, NULL));
	}
	es_buf_free(&word);
	es_buf_free(&why);
	es_strv_free(&words);
	return rc;
}

int es_template_check(const char *tmpl)
{
	struct placeholder ph[] = {
		{ "input", "x", 0 }, { "output", "x", 0 }, { "attempt_dir", "x", 0 },
		{ "shard_id", "x", 0 }, { "job_dir", "x", 0 },
	};
	struct es_strv argv = { 0 };
	int rc = expand_template(tmpl, ph, sizeof(ph) / sizeof(ph[0]), ES_EUSAGE, &argv);
	es_strv_free(&argv);
	if (!rc && (!ph[0].used || !ph[1].used))
		rc = es_error(ES_EUSAGE, "bad processor command template '%s': it must use both {input} and {output}",
			      tmpl);
	return rc;
}

int es_template_expand(const char *tmpl, const struct es_template_vars *v, struct es_strv *argv)
{
	struct placeholder ph[] = {
		{ "input", v->input, 0 }, { "output", v->output, 0 }, { "attempt_dir", v->attempt_dir, 0 },
		{ "shard_id", v->shard_id, 0 }, { "job_dir", v->job_dir, 0 },
	};
	struct es_strv words = ES_STRV_INIT;
	int rc = expand_template(tmpl, ph, sizeof(ph) / sizeof(ph[0]), ES_EINVAL, &words);
	for (size_t i = 0; !rc && i < words.n; i++) {
		rc = es_strv_push(argv, words.v[i]);
		words.v[i] = NULL;
	}
	if (rc)
		for (size_t i = 0; i < words.n; i++)
			free(words.v[i]);
	free(words.v);
	return rc;
}

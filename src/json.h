/*
 * json: metadata JSON (manifest, attempt, done, failed, merge, lock files) through cJSON.
 *
 * Internal to libeshard (it exposes cJSON). Written the way Python's json module writes the
 * reference's files (docs/job-folder.md#how-files-are-written): keys sorted, ensure_ascii=False,
 * floats as Python's repr. Integers are kept exact: the parser stores every integer literal as a
 * cJSON raw node holding its digits, and es_json_add_int() does the same, so a file read and
 * written back keeps 1 as 1 and 1.0 as 1.0, and nanosecond times do not lose precision.
 */
#ifndef ESHARD_JSON_H
#define ESHARD_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "eshard/buf.h"

/* Parse text; on failure es_error("Invalid JSON in <what>: ...") and NULL. */
cJSON *es_json_parse(const char *text, size_t len, const char *what);
/* Read and parse a file; ES_ENOENT (quietly, no message) when it does not exist. */
int es_json_load(const char *path, cJSON **out);
/* Like es_json_load, but a missing file is reported as an error too. */
int es_json_load_required(const char *path, const char *what, cJSON **out);

/* Append the serialisation: pretty (indent 2, one trailing newline) or one line
 * (", " and ": " separators, one trailing newline). */
int es_json_dump(const cJSON *v, int pretty, struct es_buf *out);
int es_json_write_atomic(const char *path, const cJSON *v);
/* 0 published, 1 somebody else published first. */
int es_json_publish_exclusive(const char *path, const cJSON *v);

cJSON *es_json_new_int(int64_t v);
/* A JSON array of the n strings v (NULL when out of memory). */
cJSON *es_json_str_array(char *const *v, size_t n);
/* Add (or replace) obj[key]; they return 0, or ES_ENOMEM. */
int es_json_set(cJSON *obj, const char *key, cJSON *item);
int es_json_set_int(cJSON *obj, const char *key, int64_t v);
int es_json_set_str(cJSON *obj, const char *key, const char *s);
int es_json_set_float(cJSON *obj, const char *key, double v);
int es_json_set_bool(cJSON *obj, const char *key, int v);
int es_json_set_null(cJSON *obj, const char *key);

/* Accessors: NULL / nonzero when missing or of another type. */
const char *es_json_get_str(const cJSON *obj, const char *key);
int es_json_get_i64(const cJSON *obj, const char *key, int64_t *out);
int es_json_to_i64(const cJSON *v, int64_t *out);
int es_json_get_num(const cJSON *obj, const char *key, double *out);
int es_json_is_int(const cJSON *v);
/* A time given as epoch seconds under epoch_key, else as ISO 8601 under iso_key (es_time_parse_iso
 * in clock.h); -1 when neither gives one. */
double es_json_get_epoch(const cJSON *obj, const char *epoch_key, const char *iso_key);

#endif

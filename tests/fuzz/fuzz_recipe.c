/*
 * libFuzzer target: the YAML recipe reader (src/recipe.c over src/yaml.c and src/pyval.c):
 * es_recipe_load() of the input as a recipe file, without the Data-Juicer registry (operator
 * kinds by their names, as when Data-Juicer is not installed; no child process).
 *
 * Properties: 0 with a recipe whose executor_type is "default" or "ray", whose media and index
 * keys are non-empty strings and index keys sorted and distinct; or ES_EINVAL / ES_EIO with
 * *out zeroed. The YAML caps (ES_RECIPE_MAX_NODES, ES_RECIPE_MAX_DEPTH) bound what an alias
 * bomb costs; libFuzzer's -rss_limit_mb and -timeout catch one that gets through.
 */
#include "fuzzlib.h"

#include "eshard/log.h"
#include "eshard/recipe.h"

#include <string.h>

static char path[600];
static struct es_recipe_opts opts;

static void setup(void)
{
	snprintf(path, sizeof(path), "%s/recipe.yaml", fuzz_scratch());
	opts.base_dir = fuzz_scratch(); /* relative custom_operator_paths resolve here */
	es_log_quiet_begin();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!path[0])
		setup();
	fuzz_write(path, data, size);
	struct es_recipe r;
	int rc = es_recipe_load(path, &opts, &r);
	FUZZ_CHECK(rc == 0 || rc == ES_EINVAL || rc == ES_EIO);
	if (rc) {
		static const struct es_recipe zero;
		FUZZ_CHECK(!memcmp(&r, &zero, sizeof(r)));
		return 0;
	}
	FUZZ_CHECK(r.executor_type && (!strcmp(r.executor_type, "default") || !strcmp(r.executor_type, "ray")));
	for (size_t i = 0; i < r.n_media; i++)
		FUZZ_CHECK(r.media_keys[i] && *r.media_keys[i]);
	for (size_t i = 0; i < r.n_index; i++) {
		FUZZ_CHECK(r.index_keys[i] && *r.index_keys[i]);
		FUZZ_CHECK(i == 0 || strcmp(r.index_keys[i - 1], r.index_keys[i]) < 0);
	}
	FUZZ_CHECK(!r.has_ray_address || (r.ray_address_str && r.ray_address_repr));
	es_recipe_free(&r);
	return 0;
}

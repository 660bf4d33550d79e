#include "eshard/env.h"

#include <string.h>

int es_env_name_is(const char *kv, const char *name)
{
	size_t n = strlen(name);
	return !strncmp(kv, name, n) && (kv[n] == '=' || kv[n] == '\0');
}

int es_env_is_launcher_identity(const char *kv)
{
	static const char *const prefixes[] = {
		"OMPI_", "PMIX_", "PMI_", "PRTE_", "HYDRA_", "MV2_COMM_WORLD_", "SLURM_", "SLURMD_",
		"MASTER_", "DJ_ELASTIC_",
	};
	static const char *const names[] = {
		"WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
		"ROLE_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "PAI_JOB_ID", "DLC_JOB_ID", "JOB_ID",
		"RAY_ADDRESS",
	};
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
		if (!strncmp(kv, prefixes[i], strlen(prefixes[i])))
			return 1;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (es_env_name_is(kv, names[i]))
			return 1;
	return 0;
}

/*
 * Unit tests of src/env.c: environment entries by name and the launcher-identity filter of
 * child environments.
 */
#include "testlib.h"

#include "eshard/env.h"

#include <stdio.h>

static void test_env_name_is(void)
{
	CHECK_INT_EQ(es_env_name_is("PATH=/bin", "PATH"), 1);
	CHECK_INT_EQ(es_env_name_is("PATH=", "PATH"), 1);
	CHECK_INT_EQ(es_env_name_is("PATH", "PATH"), 1);
	CHECK_INT_EQ(es_env_name_is("PATH=a=b", "PATH"), 1);
	CHECK_INT_EQ(es_env_name_is("PATHX=1", "PATH"), 0);
	CHECK_INT_EQ(es_env_name_is("PAT=1", "PATH"), 0);
	CHECK_INT_EQ(es_env_name_is("path=1", "PATH"), 0);
	CHECK_INT_EQ(es_env_name_is("XPATH=1", "PATH"), 0);
	CHECK_INT_EQ(es_env_name_is("", "PATH"), 0);
}

static void test_launcher_identity(void)
{
	static const char *const yes[] = {
		"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=4", "OMPI_MCA_btl=self",
		"PMIX_RANK=1", "PMIX_NAMESPACE=x", "PMI_RANK=0", "PMI_SIZE=2", "PRTE_MCA_x=1",
		"HYDRA_CONTROL_FD=3", "MV2_COMM_WORLD_RANK=0",
		"SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_JOB_ID=123", "SLURM_LOCALID=0",
		"SLURMD_NODENAME=n1",
		"WORLD_SIZE=2", "RANK=0", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1", "NODE_RANK=0",
		"GROUP_RANK=0", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500",
		"PAI_JOB_ID=j", "DLC_JOB_ID=j", "JOB_ID=j", "DJ_ELASTIC_RUN_ID=r",
		"DJ_ELASTIC_SHARD_CHILD=1", "RAY_ADDRESS=10.0.0.1:6379", "RAY_ADDRESS=", "RANK",
	};
	static const char *const no[] = {
		"PATH=/usr/bin", "HOME=/root", "PYTHONPATH=/x", "LD_LIBRARY_PATH=/l",
		"CUDA_VISIBLE_DEVICES=0", "OMP_NUM_THREADS=4", "RAY_TMPDIR=/tmp/ray",
		"RANKING=1", "MY_RANK=1", "XRANK=0", "WORLD_SIZES=3", "JOB_IDX=1", "XJOB_ID=1",
		"RAY_ADDRESS_FILE=x", "OMPI=1", "SLURM=1", "MASTER=1", "DJ_ELASTIC=1",
		"ompi_comm_world_rank=0", "rank=0", "",
	};
	int n_yes = 0, n_no = 0;
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
		if (!CHECK_INT_EQ(es_env_is_launcher_identity(yes[i]), 1))
			fprintf(stderr, "  entry: %s\n", yes[i]);
		else
			n_yes++;
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		if (!CHECK_INT_EQ(es_env_is_launcher_identity(no[i]), 0))
			fprintf(stderr, "  entry: %s\n", no[i]);
		else
			n_no++;
	CHECK_INT_EQ(n_yes, sizeof(yes) / sizeof(yes[0]));
	CHECK_INT_EQ(n_no, sizeof(no) / sizeof(no[0]));
}

int main(void)
{
	test_env_name_is();
	test_launcher_identity();
	return test_done();
}

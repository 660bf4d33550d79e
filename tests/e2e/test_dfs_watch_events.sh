#!/bin/bash
# tests/e2e/test_dfs_watch.sh with the shards' events written as workers write them: the kept
# view follows the other client's shards from the events, listing none of the job's folders.
ESHARD_DFS_WATCH_EVENTS=1 exec bash "$(dirname "$0")/test_dfs_watch.sh"

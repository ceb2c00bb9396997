-- The api's home read names the reader's partition of timelines (docs/adr/0153): a generic plan over the parent
-- locks all 32 partitions before it prunes to one, and past 16 locks a backend leaves the fast path. The read checks
-- that the table it names is still the partition it was (the partition constraint the api read from the catalog)
-- by this function, declared IMMUTABLE so that the planner evaluates it once, when it plans the statement, instead
-- of at every execution (pg_get_partition_constraintdef deparses the constraint: measured dearer than the locks it
-- saves). That is sound because a plan is made again whenever its result could change: the plan depends on the
-- partition it reads (and names here), and detaching, attaching or dropping that partition invalidates it.
CREATE OR REPLACE FUNCTION walfeed_timeline_partition_is(partition regclass, constraint_text text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT pg_catalog.pg_get_partition_constraintdef(partition) IS NOT DISTINCT FROM constraint_text $$;

-- api read path: posts whose fan-out is not decided yet (fanned_out IS NULL) of the authors a user follows are
-- merged into the home timeline at read time, so a new post shows up before the worker has pushed it.
-- Small in steady state: the worker decides every post shortly after it is written.
CREATE INDEX IF NOT EXISTS posts_pending_idx ON posts (author_id, id DESC)
    WHERE fanned_out IS NULL AND deleted_at IS NULL;

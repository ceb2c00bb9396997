-- Every post's author has its row in his own timeline from the moment the post is written (the api's CREATE_POST
-- writes it with the post: docs/adr/0157), so the home read needs no branch for the reader's own posts. Before this,
-- the worker wrote the own row of pushed posts only, and the read found the others (undecided, or a celebrity's
-- pulled posts) in posts. Here the missing own rows of the alive posts at or above their author's floor are written
-- once; a post an older api writes during the upgrade gets its row from the worker when it is decided, and
-- `walfeed rebuild timelines` reports and repairs any other (a missing row of the user's own post).
INSERT INTO timelines (user_id, post_id, author_id)
SELECT p.author_id, p.id, p.author_id
FROM posts p JOIN users u ON u.id = p.author_id
WHERE p.deleted_at IS NULL AND p.fanned_out IS NOT TRUE AND p.id >= u.timeline_floor
ORDER BY p.author_id, p.id
ON CONFLICT DO NOTHING;

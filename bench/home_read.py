"""Home-timeline latency through the real api for readers who follow few and many accounts (docs/adr/0096).

    .venv/bin/python -m bench.home_read [--rounds 5] [--reads 300]

Seeds its own database: 5,020 authors with 40 posts each (20 celebrities, whose posts are pulled at read time,
5,000 others, and 5,000 more celebrities), a reader following 20 accounts and one following 5,000 (each with 4 of
the 20 celebrities among them) with the worker's capped timeline materialized (newest 800 pushed rows, floor
below), and a third reader following the 5,000 other celebrities. Starts `walfeed api` (2 processes) and reads,
one request at a time over one keep-alive connection, the pages below in turn (each round interleaves them, so
they share the machine's moment):

- few / many: the first page (20 posts) of the readers following 20 and 5,000 accounts;
- deep: the reader following 5,000, 100 posts below the floor (a forged cursor: from posts + follows);
- celebrities: the first page of the reader following 5,000 celebrities (100 posts).

Reports p50 and p99 per page and round, and the medians over rounds of p50(many) / p50(few) and of each page's p50
against p50(few): the cost of following more, with the api's own per-request cost in both terms.
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import time
import uuid
from pathlib import Path

import httpx
import psycopg

from bench.lib import entry, infra
from bench.lib.stats import percentile
from testkit.processes import free_port

AUTHORS, CELEBRITIES, POSTS_EACH, CAP = 5020, 20, 40, 800  # authors 1..20 celebrities, 21..5020 not
STAR_AUTHORS = 5000  # more celebrities, AUTHORS + 1 .. AUTHORS + 5000, all followed by the third reader
FEW, MANY, STARS = AUTHORS + STAR_AUTHORS + 1, AUTHORS + STAR_AUTHORS + 2, AUTHORS + STAR_AUTHORS + 3

SEED = """
INSERT INTO users (id, handle, token_hash, follower_count) OVERRIDING SYSTEM VALUE
    SELECT g, 'u' || g, sha256(('bench' || g)::bytea),
           CASE WHEN g <= %(celebrities)s OR g BETWEEN %(authors)s + 1 AND %(authors)s + %(stars)s THEN 20000 ELSE 0 END
    FROM generate_series(1, %(authors)s + %(stars)s + 3) g;
SELECT setval(pg_get_serial_sequence('users', 'id'), %(authors)s + %(stars)s + 3);
INSERT INTO follows (follower_id, followee_id)
    SELECT %(few)s, g FROM generate_series(1, 4) g UNION ALL
    SELECT %(few)s, %(celebrities)s + g * 97 FROM generate_series(1, 16) g UNION ALL
    SELECT %(many)s, g FROM generate_series(1, 4) g UNION ALL
    SELECT %(many)s, %(celebrities)s + g FROM generate_series(1, 4996) g UNION ALL
    SELECT %(star_reader)s, %(authors)s + g FROM generate_series(1, %(stars)s) g;
UPDATE users u SET following_count = c.n FROM (SELECT follower_id, count(*) n FROM follows GROUP BY 1) c
    WHERE u.id = c.follower_id;
INSERT INTO posts (author_id, body, fanned_out)
    SELECT u, 'post ' || g || ' of ' || u, u BETWEEN %(celebrities)s + 1 AND %(authors)s
    FROM generate_series(1, %(authors)s + %(stars)s) u, generate_series(1, %(posts)s) g ORDER BY g, u;
-- the worker's capped timelines: the newest pushed posts of the followed authors, older ones below the floor
INSERT INTO timelines (user_id, post_id, author_id)
    SELECT r, x.id, x.author_id FROM (VALUES (%(few)s), (%(many)s)) r(r)
    CROSS JOIN LATERAL (SELECT p.id, p.author_id FROM follows f JOIN posts p ON p.author_id = f.followee_id
                        WHERE f.follower_id = r AND p.fanned_out ORDER BY p.id DESC LIMIT %(cap)s) x;
UPDATE users u SET timeline_floor = m.floor FROM (SELECT user_id, min(post_id) floor FROM timelines GROUP BY 1) m
    WHERE u.id = m.user_id;
"""


def forged(last_id: int) -> str:
    return base64.urlsafe_b64encode(f'{{"v":1,"k":"home","id":{last_id}}}'.encode()).rstrip(b"=").decode()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reads", type=int, default=300, help="reads of each page per round")
    parser.add_argument("--out", type=Path, help="folder for the api's log (default bench/results/<ts>-home)")
    args = parser.parse_args()
    logs = infra.results_folder(args.out, "home") / "logs"
    with infra.Resources(uuid.uuid4().hex[:6], logs) as res:
        return run(res, args)


def run(res: infra.Resources, args: argparse.Namespace) -> int:
    url = res.database("home")
    with psycopg.connect(url, autocommit=True) as conn:
        psycopg.ClientCursor(conn).execute(SEED, {"authors": AUTHORS, "celebrities": CELEBRITIES, "posts": POSTS_EACH,
                                                  "cap": CAP, "few": FEW, "many": MANY, "star_reader": STARS,
                                                  "stars": STAR_AUTHORS})
        conn.execute("VACUUM (ANALYZE)")
        floor = conn.execute("SELECT timeline_floor FROM users WHERE id = %s", (MANY,)).fetchone()
        pulled = conn.execute("SELECT count(*) FROM follows WHERE follower_id = %s AND pulled", (STARS,)).fetchone()
    assert floor is not None and pulled is not None
    port = free_port()
    res.start("api", ["api", "--port", str(port)], {
        "WALFEED_DATABASE_URL": url, "WALFEED_API_WORKERS": "2", "WALFEED_LOG_LEVEL": "WARNING"})
    pages: dict[str, tuple[int, dict[str, str | int]]] = {"few": (FEW, {"limit": 20}), "many": (MANY, {"limit": 20}),
             "deep": (MANY, {"limit": 100, "cursor": forged(int(floor[0]) - 1000)}),
             "celebrities": (STARS, {"limit": 100})}
    print(f"readers following 20, 5,000 and 5,000 celebrities ({pulled[0]} pulled followees); api 2 processes; "
          f"one client, one request at a time; nproc {os.cpu_count()}")
    ratios: dict[str, list[float]] = {name: [] for name in pages}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        infra.wait_ready(client)
        auth = {name: {"Authorization": f"Bearer {infra.token(user)}"} for name, (user, _) in pages.items()}
        for name, (_, params) in pages.items():  # warm-up, and every page is a full one
            reply = client.get("/v1/timeline", params=params, headers=auth[name])
            assert reply.status_code == 200 and len(reply.json()["items"]) == params["limit"], (name, reply.text)
        for round_ in range(1, args.rounds + 1):
            times: dict[str, list[float]] = {name: [] for name in pages}
            for _ in range(args.reads):
                for name, (_, params) in pages.items():
                    started = time.perf_counter()
                    reply = client.get("/v1/timeline", params=params, headers=auth[name])
                    times[name].append(time.perf_counter() - started)
                    assert reply.status_code == 200, reply.text
            p50 = {name: percentile(t, 0.5) for name, t in times.items()}
            for name in pages:
                ratios[name].append(p50[name] / p50["few"])
            print(f"round {round_}: " + "; ".join(
                f"{name} p50 {p50[name] * 1000:.2f} ms p99 {percentile(t, 0.99) * 1000:.2f} ms"
                for name, t in times.items()), flush=True)
    print("medians over rounds of p50 / p50(few): " + ", ".join(
        f"{name} {statistics.median(r):.2f}" for name, r in ratios.items() if name != "few"))
    return 0


if __name__ == "__main__":
    entry.run(main)

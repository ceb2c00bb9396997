"""The framework's floor: a minimal FastAPI app doing the api's work with nothing of walfeed around it.

    python -m bench.floor_app --port P --workers N --pool M [--server granian|uvicorn]   (WALFEED_DATABASE_URL)

The same server as `walfeed api` (granian, or uvicorn with httptools and uvloop: --server, as WALFEED_API_SERVER),
N processes, a pool of M connections each, no access log. GET /page?user=ID runs the bare page statement (a
reader's newest 20 timeline rows joined with their posts) and POST /posts?author=ID the api's one-statement insert
of a post and its outbox row (sql.CREATE_POST); the rows go to JSON with orjson. No auth, no validation beyond
FastAPI's own of the query, no middleware.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import psycopg
import uvicorn
from fastapi import FastAPI, Request, Response
from granian import Granian
from granian.constants import HTTPModes, Interfaces, Loops
from granian.log import LogLevels
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from services.api import sql

# The page's 20 ids first (one range of the reader's timeline index), then each post by its key: the cheapest plan of
# a page in any world. Written as a plain join, Postgres may merge the reader's rows with posts_pkey read backwards,
# which costs 20 posts when the page is the server's newest posts (a reader following every author of a small
# bench) and thousands when the reader follows a small part of the authors (docs/results.md "The bench's world").
PAGE = """SELECT p.id, p.author_id, p.body, p.created_at
FROM (SELECT post_id FROM timelines WHERE user_id = %(user)s ORDER BY post_id DESC LIMIT 20) t
CROSS JOIN LATERAL (SELECT id, author_id, body, created_at FROM posts WHERE id = t.post_id) p
ORDER BY t.post_id DESC"""


def app() -> FastAPI:
    size = int(os.environ["FLOOR_POOL"])
    pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]] = AsyncConnectionPool(
        os.environ["WALFEED_DATABASE_URL"], min_size=size, max_size=size, open=False,
        kwargs={"autocommit": True, "row_factory": dict_row}, connection_class=psycopg.AsyncConnection[dict[str, Any]])

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await pool.open()
        yield
        await pool.close()

    floor = FastAPI(lifespan=lifespan)

    @floor.get("/page")
    async def page(user: int) -> Response:
        async with pool.connection() as conn:
            rows = await (await conn.execute(PAGE, {"user": user})).fetchall()
        return Response(orjson.dumps({"items": rows, "next_cursor": None}), media_type="application/json")

    @floor.post("/posts", status_code=201)
    async def post(author: int, request: Request) -> Response:
        body = orjson.loads(await request.body())["body"]
        async with pool.connection() as conn:
            row = await (await conn.execute(sql.CREATE_POST, {"author": author, "body": body, "key": None,
                                                              "hash": None, "trace": None})).fetchone()
        return Response(orjson.dumps(row), status_code=201, media_type="application/json")

    return floor


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pool", type=int, default=4)
    parser.add_argument("--server", choices=["granian", "uvicorn"], default="granian")
    args = parser.parse_args()
    os.environ["FLOOR_POOL"] = str(args.pool)
    if args.server == "uvicorn":
        uvicorn.run("bench.floor_app:app", factory=True, host="127.0.0.1", port=args.port, workers=args.workers,
                    loop="uvloop", http="httptools", log_level="warning", access_log=False)
    else:  # as services/api/main.py runs it
        multiprocessing.set_start_method("spawn", force=True)
        Granian("bench.floor_app:app", factory=True, address="127.0.0.1", port=args.port, interface=Interfaces.ASGI,
                workers=args.workers, loop=Loops.auto, http=HTTPModes.http1, websockets=False,
                log_level=LogLevels.warning).serve()
